"""Plan mode [002 "I comandi slash", "completed non significa consegnato"]: read-only tools plus ``submit_plan``.

``/plan`` switches the conversation to plan mode (``conversation_modes``) for this turn and
every later one, until ``/plan off``. A plan run is offered only the granted tools whose kind
is ``read`` (``switchboard.tool_catalog.TOOL_KINDS``) and the local ``submit_plan`` tool. The
plan it submits is the run's final text (sent like any answer), its summary, and a tool call
in the trace. A plan run that never calls ``submit_plan`` stays ``completed`` but its vitality
is ``empty`` (error family ``silentRun``): whatever the model wrote instead is kept in the
trace and the summary, and nothing is sent.
"""

from __future__ import annotations

from dataclasses import replace

from services.runner.interceptors import CallContext, StopRequest
from services.runner.outcome import LoopOutcome, OutcomeKind
from services.runner.providers.base import ToolCallRequest, ToolOutcome, ToolSpec
from switchboard.tool_catalog import TOOL_KINDS, ToolKind

SUBMIT_PLAN = "submit_plan"
SUBMIT_PLAN_SPEC = ToolSpec(
    name=SUBMIT_PLAN,
    description="Submit the plan (numbered, concrete steps). Ends the run; the plan is sent as the answer.",
    input_schema={
        "type": "object",
        "properties": {"plan": {"type": "string", "description": "the plan, as numbered steps"}},
        "required": ["plan"],
    },
)
PLAN_OFF_WORDS = frozenset({"off", "stop", "exit", "end"})
SUMMARY_PLAN_CHARS = 1_500


def read_only(granted: tuple[str, ...]) -> tuple[str, ...]:
    """The granted tools a plan run may use: only ``read`` tools (unknown kinds are not read)."""
    return tuple(name for name in granted if TOOL_KINDS.get(name) is ToolKind.READ)


class PlanRecorder:
    """The ``submit_plan`` tool: records the plan and ends the run with it."""

    def __init__(self) -> None:
        self.plan: str | None = None

    async def before_call(self, ctx: CallContext, call: ToolCallRequest) -> ToolOutcome | None:
        if call.name != SUBMIT_PLAN:
            return None
        plan = str(call.arguments.get("plan", "")).strip()
        if not plan:
            return ToolOutcome(call.id, call.name, "The plan is empty: write the steps in `plan`.", is_error=True)
        self.plan = plan
        ctx.stop = StopRequest(OutcomeKind.FINISHED, final_text=plan, detail="plan submitted")
        return ToolOutcome(call.id, call.name, "Plan recorded.")

    async def after_call(self, ctx: CallContext, call: ToolCallRequest, outcome: ToolOutcome) -> ToolOutcome:
        return outcome

    def settle(self, outcome: LoopOutcome) -> LoopOutcome:
        """The submitted plan is the answer; an answer without a plan is an empty run."""
        if self.plan is not None and outcome.kind is OutcomeKind.FINISHED:
            return replace(outcome, final_text=self.plan, summary=f"Plan submitted:\n{self.plan[:SUMMARY_PLAN_CHARS]}")
        if outcome.kind is OutcomeKind.ANSWERED or (outcome.kind is OutcomeKind.FINISHED and self.plan is None):
            said = (outcome.final_text or "").strip()
            summary = "Plan mode: no plan was submitted (submit_plan was never called); nothing was sent."
            if said:
                summary += f" The model wrote instead: {said[:SUMMARY_PLAN_CHARS]}"
            return replace(outcome, kind=OutcomeKind.ANSWERED, final_text=None, summary=summary)
        return outcome
