"""After a handoff the humans own the conversation: nothing is dispatched to agents, nothing is
lost (each dispatch gets a recorded decision), until the API's handback (wake reason
``assignment``) clears the flag."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta

import pytest

from services.dispatcher.policy import HANDED_OFF_REASON, PolicyConfig
from switchboard.contracts import (
    ConcurrencyPolicy,
    DispatchOutcome,
    RunStatus,
    TriggerConfig,
    WakeContext,
    WakeReason,
)
from switchboard.run_outcomes import WITH_HUMANS
from tests.unit.dispatcher.builders import T0, completed, dispatch, index_of, snapshot
from tests.unit.dispatcher.test_policy import FAST, Conv, outcomes, runs, tick

LISTENS_TO_ASSIGNMENT = TriggerConfig(event_types=("message", "assignment"))


def handed_off(trigger: TriggerConfig | None = None, config: PolicyConfig | None = None) -> Conv:
    """A conversation whose only run just ended in a handoff."""
    conv = Conv(index_of(snapshot(1, trigger=trigger, policy=ConcurrencyPolicy.ENQUEUE)), config or FAST)
    (run,) = runs(conv.send(dispatch("quero falar com um humano")))
    conv.send(completed(run.run_id, run.agent_id, run.version_id, status=RunStatus.HANDOFF))
    assert conv.state is not None and conv.state.human_owned
    return conv


@dataclass(frozen=True)
class Case:
    name: str
    wake: WakeReason
    dry_run: bool
    trigger: TriggerConfig | None
    outcome: DispatchOutcome
    runs: int
    still_human_owned: bool


CASES = [
    Case("customer message", WakeReason.USER_MESSAGE, False, None, DispatchOutcome.CONV_BUSY, 0, True),
    Case("follow-up", WakeReason.FOLLOW_UP, False, None, DispatchOutcome.CONV_BUSY, 0, True),
    Case("dry run (test mode)", WakeReason.USER_MESSAGE, True, None, DispatchOutcome.DISPATCHED, 1, True),
    Case(
        "handback, agent listens",
        WakeReason.ASSIGNMENT,
        False,
        LISTENS_TO_ASSIGNMENT,
        DispatchOutcome.DISPATCHED,
        1,
        False,
    ),
    Case("handback, nobody listens", WakeReason.ASSIGNMENT, False, None, DispatchOutcome.NO_MATCH, 0, False),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_dispatches_while_the_humans_own_the_conversation(case: Case) -> None:
    conv = handed_off(case.trigger)
    t = conv.send(dispatch("oi?", wake=case.wake, dry_run=case.dry_run), at=T0 + timedelta(seconds=10))
    assert outcomes(t) == [case.outcome]
    assert len(runs(t)) == case.runs
    if case.outcome is DispatchOutcome.CONV_BUSY:
        assert t.decisions[0].reason == HANDED_OFF_REASON
    assert conv.state is not None and conv.state.human_owned is case.still_human_owned


def test_after_the_handback_customer_messages_are_dispatched_again() -> None:
    conv = handed_off()
    assert outcomes(conv.send(dispatch("ainda aí?"))) == [DispatchOutcome.CONV_BUSY]
    conv.send(dispatch(wake=WakeReason.ASSIGNMENT))
    t = conv.send(dispatch("voltei"), at=T0 + timedelta(seconds=10))
    assert outcomes(t) == [DispatchOutcome.DISPATCHED] and len(runs(t)) == 1


def test_the_flag_outlives_the_idle_state_ttl() -> None:
    config = PolicyConfig(lease_s=30, max_attempts=3, reply_interval_s=0, state_ttl_s=3600)
    conv = handed_off(config=config)
    later = T0 + timedelta(seconds=3601)
    t = conv.send(tick(later), at=later)
    assert t.state is not None and t.state.human_owned and t.state.updated_at == later
    assert outcomes(conv.send(dispatch("oi"), at=later)) == [DispatchOutcome.CONV_BUSY]


def test_an_approval_resume_is_not_a_handback() -> None:
    """Approving (or rejecting) an action the agent proposed wakes its parked run with an
    ``assignment`` naming that run; in a conversation the humans took over it stays theirs."""
    conv = handed_off(LISTENS_TO_ASSIGNMENT)
    resume = dispatch(wake=WakeReason.ASSIGNMENT).model_copy(
        update={"wake_context": WakeContext(run_id=uuid.uuid4(), assigned_by_user_id=uuid.uuid4())}
    )
    t = conv.send(resume, at=T0 + timedelta(seconds=10))
    assert outcomes(t) == [DispatchOutcome.CONV_BUSY] and runs(t) == []
    assert conv.state is not None and conv.state.human_owned
    assert outcomes(conv.send(dispatch("oi?"), at=T0 + timedelta(seconds=11))) == [DispatchOutcome.CONV_BUSY]


def test_a_run_that_found_people_had_taken_over_hands_the_conversation_to_them() -> None:
    """A person took the conversation over (the API) while a run was going; the follow-up run for
    a message that was waiting is claimed after the takeover, is not run (``conversation_with_humans``)
    and tells the dispatcher: the rest of the queue is the people's, and so is what comes next."""
    conv = Conv(index_of(snapshot(1, policy=ConcurrencyPolicy.ENQUEUE)), FAST)
    (first,) = runs(conv.send(dispatch("oi")))
    assert outcomes(conv.send(dispatch("ainda aí?"))) == [DispatchOutcome.QUEUED]
    (follow_up,) = runs(conv.send(completed(first.run_id, first.agent_id, first.version_id), at=T0))
    assert outcomes(conv.send(dispatch("alô?"), at=T0 + timedelta(seconds=1))) == [DispatchOutcome.QUEUED]
    not_run = completed(follow_up.run_id, follow_up.agent_id, follow_up.version_id, status=RunStatus.ABORTED)
    t = conv.send(not_run.model_copy(update={"abort_reason": WITH_HUMANS}), at=T0 + timedelta(seconds=2))
    assert runs(t) == []
    assert outcomes(t) == [DispatchOutcome.CONV_BUSY] and t.decisions[0].reason == HANDED_OFF_REASON
    assert conv.state is not None and conv.state.human_owned and conv.state.pending == []
    assert outcomes(conv.send(dispatch("oi?"), at=T0 + timedelta(seconds=3))) == [DispatchOutcome.CONV_BUSY]


def test_a_handback_queued_before_the_handoff_outcome_arrived_keeps_the_conversation_the_agents() -> None:
    """The topics are not ordered with each other: a person can take over and hand back before
    the run's outcome reaches the dispatcher. The handback's wake, already queued, wins."""
    conv = Conv(index_of(snapshot(1, trigger=LISTENS_TO_ASSIGNMENT, policy=ConcurrencyPolicy.ENQUEUE)), FAST)
    (run,) = runs(conv.send(dispatch("quero falar com um humano")))
    assert outcomes(conv.send(dispatch(wake=WakeReason.ASSIGNMENT))) == [DispatchOutcome.QUEUED]
    t = conv.send(completed(run.run_id, run.agent_id, run.version_id, status=RunStatus.HANDOFF))
    assert conv.state is not None and not conv.state.human_owned
    assert len(runs(t)) == 1, "the handback's wake runs"


@pytest.mark.parametrize("policy", [ConcurrencyPolicy.ENQUEUE, ConcurrencyPolicy.REJECT])
def test_a_handback_nobody_listens_to_still_outranks_an_older_handoff_outcome(policy: ConcurrencyPolicy) -> None:
    """With the default trigger no agent listens to ``assignment``: the handback is a ``no_match``
    (or ``conv_busy`` under ``reject``), never queued — and still the newer word."""
    conv = Conv(index_of(snapshot(1, policy=policy)), FAST)
    (run,) = runs(conv.send(dispatch("quero falar com um humano")))
    conv.send(dispatch(wake=WakeReason.ASSIGNMENT), at=T0 + timedelta(seconds=1))
    conv.send(
        completed(run.run_id, run.agent_id, run.version_id, status=RunStatus.HANDOFF), at=T0 + timedelta(seconds=2)
    )
    assert conv.state is not None and not conv.state.human_owned
    t = conv.send(dispatch("voltei"), at=T0 + timedelta(seconds=10))
    assert outcomes(t) == [DispatchOutcome.DISPATCHED]


def test_a_run_dispatched_after_a_handback_that_hands_off_gives_the_conversation_to_the_people() -> None:
    conv = handed_off()
    conv.send(dispatch(wake=WakeReason.ASSIGNMENT), at=T0 + timedelta(seconds=5))
    (run,) = runs(conv.send(dispatch("de novo: humano!"), at=T0 + timedelta(seconds=10)))
    conv.send(
        completed(run.run_id, run.agent_id, run.version_id, status=RunStatus.HANDOFF), at=T0 + timedelta(seconds=11)
    )
    assert conv.state is not None and conv.state.human_owned
