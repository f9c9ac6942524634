"""Which runs leave a customer waiting, and which were handed back: the shared rule, kept in step
with the runner's codes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from services.runner import outcome
from switchboard import run_outcomes
from switchboard.contracts import RunCompleted, RunStatus, WakeReason
from switchboard.contracts.enums import ErrorFamily, Vitality


def test_the_abort_reasons_answered_elsewhere_are_the_runners() -> None:
    runners = {
        outcome.INTERRUPTED,
        outcome.ALREADY_ANSWERED,
        outcome.CLASSIFICATION_MISMATCH,
        outcome.WITH_HUMANS,
        outcome.CONTACT_ERASED,
    }
    assert runners == run_outcomes.ANSWERED_ELSEWHERE


def test_the_hand_back_codes_are_the_ones_the_runner_writes() -> None:
    runners = {outcome.RUNNER_SHUTDOWN, outcome.SUPERSEDED}
    assert runners == run_outcomes.HANDED_BACK_CODES


def _completed(status: RunStatus, **fields: Any) -> RunCompleted:
    now = datetime.now(UTC)
    base: dict[str, Any] = {
        "org_id": uuid.uuid4(),
        "conversation_id": uuid.uuid4(),
        "contact_id": uuid.uuid4(),
        "channel_session_id": uuid.uuid4(),
        "run_id": uuid.uuid4(),
        "agent_id": uuid.uuid4(),
        "version_id": uuid.uuid4(),
        "wake_reason": WakeReason.USER_MESSAGE,
        "message_ids": (uuid.uuid4(),),
        "status": status,
        "vitality": Vitality.FAILED,
        "provider": "anthropic",
        "model": "claude-haiku-4-5",
        "tokens_in": 1,
        "tokens_out": 1,
        "cost_micro_usd": 1,
        "latency_ms": 1,
        "steps": 1,
        "started_at": now,
        "completed_at": now,
    }
    return RunCompleted(**(base | fields))


@pytest.mark.parametrize(
    ("status", "fields", "unanswered", "handed_back"),
    [
        (RunStatus.FAILED, {"error_family": ErrorFamily.TRANSIENT_UPSTREAM}, True, False),
        (RunStatus.ABORTED, {"abort_reason": "max_steps_reached"}, True, False),
        (RunStatus.ABORTED, {"abort_reason": "silence_timeout"}, True, False),
        (RunStatus.FAILED, {"error_family": ErrorFamily.PROCESS_LOST, "error_code": "lease_expired"}, True, False),
        (RunStatus.FAILED, {"error_family": ErrorFamily.PROCESS_LOST, "error_code": "runner_shutdown"}, False, True),
        (RunStatus.FAILED, {"error_family": ErrorFamily.PROCESS_LOST, "error_code": "superseded"}, False, True),
        (RunStatus.ABORTED, {"abort_reason": "interrupted"}, False, False),
        (RunStatus.ABORTED, {"abort_reason": "classification_mismatch"}, False, False),
        (RunStatus.FAILED, {"message_ids": ()}, False, False),
        (RunStatus.FAILED, {"dry_run": True}, False, False),
        (RunStatus.COMPLETED, {}, False, False),
        (RunStatus.HANDOFF, {}, False, False),
    ],
)
def test_which_runs_leave_their_customer_waiting(
    status: RunStatus, fields: dict[str, Any], unanswered: bool, handed_back: bool
) -> None:
    completed = _completed(status, **fields)
    assert run_outcomes.left_unanswered(completed) is unanswered
    assert run_outcomes.handed_back(completed) is handed_back
