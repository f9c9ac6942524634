"""Autonomy inside one run [000 §3]: which write tools are offered, what a write call does,
pause for approval and resume [003 ``interrupt()`` / ``/api/chat/resume``]. docs/autonomy.md.

- ``off`` — the area's write tools are not offered (:meth:`RunAutonomy.offered`);
- ``propose`` — :class:`AutonomyGate` answers the call without running it: an
  ``agent_decisions`` row, a Home insight and an ``insights`` record; the model is told
  it awaits approval. With the version's ``pause_on_proposal`` the run stops there and is
  parked (``awaiting_approval``) once its terminal record is written;
- ``auto`` — the call runs; it is recorded as executed with its result and its undo.

A run woken with ``wake_context.run_id`` naming a parked run whose decision was made
resumes it: the proposed call and the decision, as that call's result, close the
transcript (:meth:`RunAutonomy.resumed`). Everything except the store calls is pure.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from services.runner.autonomy_store import AUTONOMY_KEY, AutonomyStore, ResumeDecision, needs_autonomy
from services.runner.context import PromptDraft
from services.runner.interceptors import CallContext, StopRequest
from services.runner.outcome import OutcomeKind
from services.runner.pii import Pseudonymizer
from services.runner.preload import read_once
from services.runner.providers.base import AssistantMessage, ToolCallRequest, ToolOutcome, ToolResults, UserMessage
from services.runner.subject import RunSubject
from switchboard.autonomy import AutonomySettings, Gate
from switchboard.contracts import Action, RunRequested
from switchboard.db.enums import AWAITING_APPROVAL, DecisionStatus
from switchboard.tool_catalog import UNDO_TOOLS, gated_area

RESUME_PROMPT = "Continue the task you paused for the owner's approval."


def action_for(request: RunRequested, call: ToolCallRequest, *, executed_at: datetime | None = None) -> Action:
    """The action of a write call; its id is the decision id (stable across redeliveries)."""
    area = gated_area(call.name) or "cross"
    verb = "executed" if executed_at else "proposed"
    return Action(
        action_id=uuid.uuid5(request.run_id, call.id),
        action_type=call.name,
        tool_name=call.name,
        area=area,
        summary=f"{call.name} {verb} by the agent",
        arguments_json=call.arguments_json,
        executed_at=executed_at,
    )


def proposed_action(subject: RunSubject, call: ToolCallRequest, *, pause: bool) -> dict[str, Any]:
    """Everything approving needs to execute the call later, exactly as the agent asked."""
    request = subject.request
    return {
        "tool_name": call.name,
        "arguments": dict(call.arguments),
        "call_id": call.id,
        "conversation_id": str(request.conversation_id),
        "contact_id": str(request.contact_id),
        "channel_session_id": str(request.channel_session_id),
        "agent_id": str(request.agent_id),
        "version_id": str(request.version_id),
        "pause": pause,
    }


def proposal_result(action: Action, *, pause: bool) -> str:
    """What the model reads instead of the tool's result."""
    then = (
        "The run pauses now and continues when the owner decides."
        if pause
        else "Do not repeat the call; tell the customer it will be confirmed."
    )
    return json.dumps(
        {
            "status": "proposed",
            "action_id": str(action.action_id),
            "message": f"Not executed: {action.tool_name} was proposed for the owner's approval. {then}",
        }
    )


def undo_for(tool_name: str, result: dict[str, Any]) -> dict[str, Any] | None:
    """How to undo an executed action (the tool and its arguments), or None when it cannot be undone."""
    spec = UNDO_TOOLS.get(tool_name)
    if spec is None:
        return None
    tool, mapping = spec
    arguments = {arg: result.get(field_name) for arg, field_name in mapping.items()}
    if any(v is None for v in arguments.values()):
        return None
    return {"tool_name": tool, "arguments": arguments}


def decision_result(decision: ResumeDecision) -> ToolOutcome:
    """The owner's decision as the paused call's result."""
    call_id = str(decision.proposed_action.get("call_id") or decision.decision_id)
    name = str(decision.proposed_action.get("tool_name", ""))
    if decision.status is DecisionStatus.EXECUTED:
        body: dict[str, Any] = {
            "status": "approved",
            "message": "The owner approved the action and it was executed.",
            "result": (decision.execution_result or {}).get("result"),
        }
        return ToolOutcome(call_id, name, json.dumps(body, default=str))
    if decision.status is DecisionStatus.APPROVED:  # approved, but the tool refused when it ran
        error = (decision.execution_result or {}).get("error")
        body = {"status": "failed", "message": "The owner approved the action but it failed.", "error": error}
        return ToolOutcome(call_id, name, json.dumps(body, default=str), is_error=True)
    body = {"status": "rejected", "message": "The owner rejected the action; it was not executed."}
    if decision.rationale:
        body["reason"] = decision.rationale
    return ToolOutcome(call_id, name, json.dumps(body), is_error=False)


def resume_messages(draft: PromptDraft, decision: ResumeDecision) -> PromptDraft:
    """The draft with the paused call and its decided result appended (a user turn first if empty)."""
    action = decision.proposed_action
    call = ToolCallRequest.parse(
        str(action.get("call_id") or decision.decision_id), str(action.get("tool_name")), action.get("arguments")
    )
    lead = () if draft.messages else (UserMessage(RESUME_PROMPT),)
    return replace(
        draft,
        messages=(
            *draft.messages,
            *lead,
            AssistantMessage("", tool_calls=(call,)),
            ToolResults((decision_result(decision),)),
        ),
    )


@dataclass
class RunAutonomy:
    """The autonomy state of one run: settings, what it proposed and executed, whether it parked."""

    store: AutonomyStore
    subject: RunSubject
    settings: AutonomySettings
    pause_on_proposal: bool = False
    resume: ResumeDecision | None = None
    proposed_ids: set[uuid.UUID] = field(default_factory=set)
    # What ``run_completed.actions_proposed`` announces: arguments as the model wrote them (aliases, no raw PII).
    proposed: list[Action] = field(default_factory=list)
    paused: bool = False

    @classmethod
    async def load(cls, store: AutonomyStore, subject: RunSubject, granted: tuple[str, ...]) -> RunAutonomy:
        """Read the settings only when they matter: a gated write tool is granted, or this run resumes one."""
        if not needs_autonomy(subject, granted):
            return cls(store=store, subject=subject, settings=AutonomySettings())
        read = await read_once(subject, AUTONOMY_KEY, lambda: store.load(subject.request))
        return cls(
            store=store,
            subject=subject,
            settings=read.settings,
            pause_on_proposal=read.pause_on_proposal,
            resume=read.resume,
        )

    def offered(self, granted: tuple[str, ...]) -> tuple[str, ...]:
        return self.settings.offered(granted)

    def resumed(self, draft: PromptDraft) -> PromptDraft:
        return resume_messages(draft, self.resume) if self.resume is not None else draft

    def gate(self, pii: Pseudonymizer) -> AutonomyGate:
        return AutonomyGate(self, pii)

    def executed_actions(self, actions: tuple[Action, ...]) -> tuple[Action, ...]:
        """Write calls that really ran: proposals are not executed actions; each in its own area."""
        return tuple(
            a.model_copy(update={"area": gated_area(a.tool_name) or a.area})
            for a in actions
            if a.action_id not in self.proposed_ids
        )

    async def park_if_paused(self) -> bool:
        """After the terminal record: a paused run becomes ``awaiting_approval`` (if still undecided)."""
        if not self.paused:
            return False
        return await self.store.park(self.subject.request, AWAITING_APPROVAL)


class AutonomyGate:
    """The interceptor: write calls through the area's mode. Place it before the PII interceptor,
    so it records results before they are pseudonymized; arguments are revealed here."""

    def __init__(self, run: RunAutonomy, pii: Pseudonymizer) -> None:
        self._run = run
        self._pii = pii

    async def before_call(self, ctx: CallContext, call: ToolCallRequest) -> ToolOutcome | None:
        run = self._run
        request = run.subject.request
        gate = run.settings.gate(call.name)
        if gate is Gate.RUN or request.dry_run or call.error:
            return None  # not gated; a dry run executes nothing anyway (the tools say so)
        # The owner may have engaged a kill switch (or changed the area's mode) since the run
        # began: each gated write follows the settings as they are now.
        run.settings = await run.store.current_settings(request.org_id)
        gate = run.settings.gate(call.name)
        if gate is Gate.EXECUTE:
            return None
        if gate is Gate.HIDDEN:
            ctx.guard("autonomy_off", f"{call.name} refused: autonomy for its area is off")
            return ToolOutcome(call.id, call.name, f"{call.name} is not available: autonomy for its area is off.", True)
        real = self._pii.reveal_call(call)
        pause = run.pause_on_proposal
        action = action_for(request, real)
        await run.store.propose(
            request, action, proposed_action(run.subject, real, pause=pause), title=f"Approve {call.name}?"
        )
        run.proposed_ids.add(action.action_id)
        run.proposed.append(action_for(request, call))
        ctx.guard("autonomy_propose", f"{call.name} proposed for approval ({action.action_id})")
        if pause and not run.paused:
            run.paused = True
            ctx.guard("awaiting_approval", f"run paused until the owner decides on {action.action_id}")
            ctx.stop = StopRequest(OutcomeKind.ABORTED, abort_reason=AWAITING_APPROVAL, detail="awaiting approval")
        return ToolOutcome(call.id, call.name, proposal_result(action, pause=pause))

    async def after_call(self, ctx: CallContext, call: ToolCallRequest, outcome: ToolOutcome) -> ToolOutcome:
        run = self._run
        request = run.subject.request
        if outcome.is_error or request.dry_run or run.settings.gate(call.name) is not Gate.EXECUTE:
            return outcome
        real = self._pii.reveal_call(call)
        try:
            result = json.loads(outcome.content)
        except ValueError:
            result = {"text": outcome.content}
        result = result if isinstance(result, dict) else {"value": result}
        action = action_for(request, real, executed_at=datetime.now(UTC))
        await run.store.executed(
            request,
            action,
            proposed_action(run.subject, real, pause=False),
            {"result": result, "undo": undo_for(call.name, result)},
        )
        return outcome
