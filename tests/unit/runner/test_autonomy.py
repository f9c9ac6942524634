"""The pure autonomy policy (switchboard/autonomy.py) and the runner's gate (services/runner/autonomy.py)
with an in-memory store: what each mode offers, answers, records and how a pause resumes."""

from __future__ import annotations

import json
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from services.runner.autonomy import (
    RESUME_PROMPT,
    RunAutonomy,
    action_for,
    decision_result,
    resume_messages,
    undo_for,
)
from services.runner.autonomy_store import ResumeDecision
from services.runner.context import PromptDraft
from services.runner.interceptors import CallContext
from services.runner.outcome import OutcomeKind
from services.runner.pii import Pseudonymizer
from services.runner.providers.base import AssistantMessage, ToolCallRequest, ToolOutcome, ToolResults, UserMessage
from switchboard.areas import area_slugs, is_area
from switchboard.autonomy import PROMOTE_AFTER_APPROVALS, AutonomySettings, Gate, promotion_due
from switchboard.contracts import RunRequested, WakeContext
from switchboard.contracts.enums import WakeReason
from switchboard.db.enums import AWAITING_APPROVAL, AutonomyMode, DecisionStatus
from switchboard.tool_catalog import (
    CANCEL_FOLLOWUP,
    REQUEST_HUMAN_HANDOFF,
    SCHEDULE_FOLLOWUP,
    SEARCH_CONTACTS,
    SEND_WHATSAPP_MESSAGE,
    TOOL_KINDS,
    UNGATED_WRITE_TOOLS,
    WRITE_TOOL_AREAS,
    ToolKind,
    gated_area,
)

AUTO, PROPOSE, OFF = AutonomyMode.AUTO, AutonomyMode.PROPOSE, AutonomyMode.OFF


# ---------------------------------------------------------------- the policy


def test_areas_are_the_seed_planets_and_every_gated_write_tool_has_one() -> None:
    assert set(area_slugs()) == {"booking", "crm", "sales", "marketing", "content", "web", "cross"}
    writes = {n for n, k in TOOL_KINDS.items() if k is ToolKind.WRITE} - UNGATED_WRITE_TOOLS
    assert writes == set(WRITE_TOOL_AREAS) and all(is_area(a) for a in WRITE_TOOL_AREAS.values())
    assert gated_area(SEARCH_CONTACTS) is None and gated_area(REQUEST_HUMAN_HANDOFF) is None


def test_propose_is_the_default_and_kill_switches_force_off() -> None:
    assert AutonomySettings().mode("crm") is PROPOSE
    settings = AutonomySettings(modes={"crm": AUTO, "sales": OFF})
    assert settings.mode("crm") is AUTO and settings.mode("sales") is OFF and settings.mode("web") is PROPOSE
    assert AutonomySettings(modes={"crm": AUTO}, killed_areas=frozenset({"crm"})).mode("crm") is OFF
    assert AutonomySettings(org_kill_switch=True, modes={"crm": AUTO}).mode("crm") is OFF


@pytest.mark.parametrize(("mode", "gate"), [(OFF, Gate.HIDDEN), (PROPOSE, Gate.PROPOSE), (AUTO, Gate.EXECUTE)])
def test_write_tools_follow_their_area_and_reads_always_run(mode: AutonomyMode, gate: Gate) -> None:
    settings = AutonomySettings(modes={"crm": mode})
    assert settings.gate(SEND_WHATSAPP_MESSAGE) is gate
    assert settings.gate(SEARCH_CONTACTS) is Gate.RUN
    assert settings.gate(REQUEST_HUMAN_HANDOFF) is Gate.RUN  # the safety valve is never gated
    granted = (SEARCH_CONTACTS, SEND_WHATSAPP_MESSAGE, REQUEST_HUMAN_HANDOFF)
    offered = settings.offered(granted)
    assert (SEND_WHATSAPP_MESSAGE in offered) is (mode is not OFF)
    assert SEARCH_CONTACTS in offered and REQUEST_HUMAN_HANDOFF in offered


@pytest.mark.parametrize(
    ("area_mode", "own", "kill", "expected"),
    [
        (PROPOSE, AUTO, False, Gate.EXECUTE),  # promoted: this action type runs on its own
        (AUTO, PROPOSE, False, Gate.PROPOSE),  # kept asking in an area that is auto
        (PROPOSE, None, False, Gate.PROPOSE),  # no mode of its own: its area's
        (OFF, AUTO, False, Gate.HIDDEN),  # an area that is off wins
        (AUTO, AUTO, True, Gate.HIDDEN),  # and so does a kill switch
    ],
)
def test_an_action_types_own_mode_overrides_its_areas_but_never_off_or_a_kill_switch(
    area_mode: AutonomyMode, own: AutonomyMode | None, kill: bool, expected: Gate
) -> None:
    settings = AutonomySettings(
        org_kill_switch=kill,
        modes={"crm": area_mode},
        action_modes={SEND_WHATSAPP_MESSAGE: own} if own is not None else {},
    )
    assert settings.gate(SEND_WHATSAPP_MESSAGE) is expected
    # Another action type of the same area keeps the area's mode.
    assert settings.action_mode("crm", SCHEDULE_FOLLOWUP) is settings.mode("crm")


def test_promotion_is_suggested_at_the_third_approval_only_while_proposing() -> None:
    assert PROMOTE_AFTER_APPROVALS == 3
    assert [promotion_due(n, PROPOSE) for n in (1, 2, 3, 4)] == [False, False, True, False]
    assert not promotion_due(3, AUTO) and not promotion_due(3, OFF)


def test_undo_is_recorded_where_the_action_is_reversible() -> None:
    assert undo_for(SCHEDULE_FOLLOWUP, {"followup_id": "f1"}) == {
        "tool_name": CANCEL_FOLLOWUP,
        "arguments": {"followup_id": "f1"},
    }
    assert undo_for(SCHEDULE_FOLLOWUP, {}) is None
    assert undo_for(SEND_WHATSAPP_MESSAGE, {"message_id": "m"}) is None  # a sent message cannot be unsent


# ---------------------------------------------------------------- the gate


class FakeStore:
    """Records what the gate asked the store to write."""

    def __init__(self, settings: AutonomySettings) -> None:
        self.proposals: list[tuple[Any, dict[str, Any]]] = []
        self.executions: list[tuple[Any, dict[str, Any]]] = []
        self.settings = settings  # what the owner has set now (a test may change it mid-run)

    async def current_settings(self, org_id: uuid.UUID) -> AutonomySettings:
        return self.settings

    async def propose(self, request: RunRequested, action: Any, proposed: dict[str, Any], title: str) -> None:
        self.proposals.append((action, proposed))

    async def executed(self, request: RunRequested, action: Any, proposed: Any, result: dict[str, Any]) -> None:
        self.executions.append((action, result))

    async def park(self, request: RunRequested, abort_reason: str) -> bool:
        return abort_reason == AWAITING_APPROVAL


def _request(dry_run: bool = False) -> RunRequested:
    return RunRequested(
        org_id=uuid.uuid4(),
        conversation_id=uuid.uuid4(),
        contact_id=uuid.uuid4(),
        channel_session_id=uuid.uuid4(),
        run_id=uuid.uuid4(),
        agent_id=uuid.uuid4(),
        version_id=uuid.uuid4(),
        wake_reason=WakeReason.USER_MESSAGE,
        wake_context=WakeContext(),
        dry_run=dry_run,
    )


def _run(mode: AutonomyMode, *, pause: bool = False, dry_run: bool = False) -> tuple[RunAutonomy, FakeStore]:
    settings = AutonomySettings(modes={"crm": mode})
    store = FakeStore(settings)
    run = RunAutonomy(
        store=store,  # type: ignore[arg-type]
        subject=SimpleNamespace(request=_request(dry_run)),  # type: ignore[arg-type]
        settings=settings,
        pause_on_proposal=pause,
    )
    return run, store


SEND = ToolCallRequest.parse("call-1", SEND_WHATSAPP_MESSAGE, {"text": "Hi <contact_1>"})


async def test_propose_answers_the_call_with_a_proposal_of_the_real_arguments() -> None:
    run, store = _run(PROPOSE)
    pii = Pseudonymizer(names=["Ana Souza"])
    pii.text("Ana Souza")  # learn the alias the model saw
    ctx = CallContext(step=1, offered={})
    answer = await run.gate(pii).before_call(ctx, SEND)
    assert answer is not None and not answer.is_error and json.loads(answer.content)["status"] == "proposed"
    action, proposed = store.proposals[0]
    assert proposed["arguments"] == {"text": "Hi Ana Souza"} and proposed["pause"] is False
    assert action.action_id == uuid.uuid5(run.subject.request.run_id, "call-1") and action.area == "crm"
    assert ctx.stop is None
    # A proposal is not an executed action in run_completed.
    assert run.executed_actions((action,)) == ()


async def test_a_pausing_version_stops_the_run_awaiting_approval() -> None:
    run, store = _run(PROPOSE, pause=True)
    ctx = CallContext(step=1, offered={})
    await run.gate(Pseudonymizer()).before_call(ctx, SEND)
    assert ctx.stop is not None and ctx.stop.kind is OutcomeKind.ABORTED
    assert ctx.stop.abort_reason == AWAITING_APPROVAL and run.paused
    assert store.proposals[0][1]["pause"] is True
    assert await run.park_if_paused()


async def test_auto_lets_the_call_run_and_records_it_with_its_undo() -> None:
    run, store = _run(AUTO)
    gate = run.gate(Pseudonymizer())
    call = ToolCallRequest.parse("c2", SCHEDULE_FOLLOWUP, {"reason": "x", "due_in_minutes": 5})
    assert await gate.before_call(CallContext(step=1, offered={}), call) is None
    outcome = ToolOutcome("c2", SCHEDULE_FOLLOWUP, json.dumps({"status": "scheduled", "followup_id": "f9"}))
    assert await gate.after_call(CallContext(step=1, offered={}), call, outcome) == outcome
    action, result = store.executions[0]
    assert action.executed_at is not None and result["undo"]["arguments"] == {"followup_id": "f9"}


async def test_off_refuses_a_call_and_dry_runs_pass_through() -> None:
    run, _ = _run(OFF)
    refused = await run.gate(Pseudonymizer()).before_call(CallContext(step=1, offered={}), SEND)
    assert refused is not None and refused.is_error
    dry, store = _run(PROPOSE, dry_run=True)
    assert await dry.gate(Pseudonymizer()).before_call(CallContext(step=1, offered={}), SEND) is None
    assert store.proposals == []


async def test_a_kill_switch_engaged_mid_run_stops_the_next_write() -> None:
    """Settings are read when the run starts, and again before each gated write: the owner's
    kill switch (org-wide or the area's) or a mode change applies to the very next write."""
    run, store = _run(AUTO)
    gate = run.gate(Pseudonymizer())
    assert await gate.before_call(CallContext(step=1, offered={}), SEND) is None  # auto: it runs
    store.settings = AutonomySettings(org_kill_switch=True, modes={"crm": AUTO})
    ctx = CallContext(step=2, offered={})
    refused = await gate.before_call(ctx, SEND)
    assert refused is not None and refused.is_error and "off" in refused.content
    store.settings = AutonomySettings(modes={"crm": AUTO}, killed_areas=frozenset({"crm"}))
    assert (await gate.before_call(CallContext(step=3, offered={}), SEND)).is_error  # type: ignore[union-attr]
    store.settings = AutonomySettings(modes={"crm": PROPOSE})
    proposed = await gate.before_call(CallContext(step=4, offered={}), SEND)
    assert proposed is not None and json.loads(proposed.content)["status"] == "proposed" and store.proposals
    assert store.executions == []


# ---------------------------------------------------------------- resume


def _decision(status: DecisionStatus, **extra: Any) -> ResumeDecision:
    return ResumeDecision(
        decision_id=uuid.uuid4(),
        status=status,
        proposed_action={"tool_name": SEND_WHATSAPP_MESSAGE, "arguments": {"text": "Hi"}, "call_id": "call-1"},
        execution_result=extra.get("result"),
        rationale=extra.get("rationale"),
    )


def test_resume_appends_the_paused_call_and_the_decision_as_its_result() -> None:
    draft = PromptDraft(system=(), messages=(UserMessage("discount?"),), tools=())
    resumed = resume_messages(draft, _decision(DecisionStatus.EXECUTED, result={"result": {"status": "queued"}}))
    user, assistant, results = resumed.messages
    assert user == UserMessage("discount?")
    assert isinstance(assistant, AssistantMessage) and assistant.tool_calls[0].id == "call-1"
    assert isinstance(results, ToolResults) and results.results[0].call_id == "call-1"
    assert json.loads(results.results[0].content) == {
        "status": "approved",
        "message": "The owner approved the action and it was executed.",
        "result": {"status": "queued"},
    }
    empty = resume_messages(PromptDraft((), (), ()), _decision(DecisionStatus.REJECTED, rationale="too generous"))
    assert isinstance(empty.messages[0], UserMessage) and empty.messages[0].text == RESUME_PROMPT
    rejected = decision_result(_decision(DecisionStatus.REJECTED, rationale="too generous"))
    assert json.loads(rejected.content)["status"] == "rejected" and "too generous" in rejected.content
    failed = decision_result(_decision(DecisionStatus.APPROVED, result={"error": {"message": "gone"}}))
    assert failed.is_error and json.loads(failed.content)["error"] == {"message": "gone"}


def test_action_ids_are_stable_per_run_and_call() -> None:
    request = _request()
    assert action_for(request, SEND).action_id == action_for(request, SEND).action_id
    assert action_for(request, SEND).executed_at is None
