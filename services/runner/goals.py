"""Autonomous work of ``/goal`` and ``/loop`` with the cost budgets of [002 "Un turno normale non ha alcun limite"].

A goal runs in **segments**; a segment is one run. Budgets, in micro-USD:

- a segment may spend at most :data:`SEGMENT_BUDGET_MICROS` ($5.00), and never more than what
  is left of the goal: its run's cost budget is ``min($5, goal budget - spent)``. The runner's
  budget guard (``services.runner.budget.admit_step``) checks that limit before every step
  against the step's worst case, so a segment never exceeds it — hence the goal's budget is
  never exceeded at all, let alone by a whole segment;
- at 80% of the segment's budget the agent gets a nudge (once, as a note after its tool
  results, and a ``goal_budget_nudge`` guard entry in the trace) to wrap up cleanly;
- the goal's budget is ``/goal --budget N`` dollars, else :data:`GOAL_BUDGET_MICROS` ($50.00).

After a segment (:func:`verdict`): the goal is ``done`` when the agent called ``goal_complete``;
``budget_spent`` when less than :data:`MIN_SEGMENT_MICROS` is left; ``stopped`` after
:data:`MAX_SEGMENTS` segments, or when the segment failed, handed off, looped, was interrupted
or went silent (a person should look); otherwise it continues: the runner re-wakes the
conversation with wake reason ``pipelineStep`` and ``pipeline_run_id = goal id``
(``services.runner.slash_store``). A normal turn has no such budget: only these commands do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Final

from services.runner.interceptors import CallContext, StopRequest
from services.runner.outcome import (
    ANSWER_REFUSED,
    HANDOFF_UNAVAILABLE,
    INTERRUPTED,
    LOOPING,
    SILENCE_TIMEOUT,
    LoopOutcome,
    OutcomeKind,
)
from services.runner.providers.base import ToolCallRequest, ToolOutcome, ToolSpec
from switchboard.db.models.slash import GoalStatus

MICROS_PER_USD: Final = 1_000_000
SEGMENT_BUDGET_MICROS: Final = 5 * MICROS_PER_USD
GOAL_BUDGET_MICROS: Final = 50 * MICROS_PER_USD
NUDGE_FRACTION: Final = Decimal("0.8")
# Below this nothing useful fits in a segment (the smallest per-run cost budget a version may have).
MIN_SEGMENT_MICROS: Final = 10_000
# However cheap the model (a model without a catalog price costs 0), a goal never runs more segments.
MAX_SEGMENTS: Final = 20
LOOP_DEFAULT_TEXT: Final = "Keep working on what this conversation needs, step by step."

GOAL_COMPLETE = "goal_complete"
GOAL_COMPLETE_SPEC = ToolSpec(
    name=GOAL_COMPLETE,
    description="Call when the goal is achieved, with a short report. Ends the goal; the report is sent.",
    input_schema={
        "type": "object",
        "properties": {"report": {"type": "string", "description": "what was done"}},
        "required": ["report"],
    },
)


def budget_micros(budget_usd: Decimal | None) -> int:
    """The goal's budget: the explicit ``--budget`` (dollars, rounded down to a micro-USD) or $50."""
    return GOAL_BUDGET_MICROS if budget_usd is None else int(budget_usd * MICROS_PER_USD)


@dataclass(frozen=True, slots=True)
class GoalState:
    """What a segment needs of its goal (a row of ``conversation_goals``)."""

    id: object
    kind: str
    goal: str
    budget_micros: int
    segment_budget_micros: int
    spent_micros: int
    segments: int

    @property
    def left_micros(self) -> int:
        return max(0, self.budget_micros - self.spent_micros)

    @property
    def this_segment_micros(self) -> int:
        """The next segment's cost budget: $5 (or the goal's segment budget), never more than is left."""
        return min(self.segment_budget_micros, self.left_micros)

    def directive(self) -> str:
        return (
            f"{'Loop' if self.kind == 'loop' else 'Goal'}: {self.goal}\n"
            f"This is segment {self.segments + 1} (at most {MAX_SEGMENTS}). Budget of this segment: "
            f"{_usd(self.this_segment_micros)}; left for the whole goal: {_usd(self.left_micros)} of "
            f"{_usd(self.budget_micros)}."
        )


@dataclass(frozen=True, slots=True)
class Verdict:
    status: GoalStatus
    reason: str

    @property
    def continues(self) -> bool:
        return self.status is GoalStatus.ACTIVE


# A refusal is no passing failure: the next segment would likely be refused again, billed each time.
_STOPPING_ABORTS = {INTERRUPTED, LOOPING, SILENCE_TIMEOUT, ANSWER_REFUSED, HANDOFF_UNAVAILABLE}


def verdict(goal: GoalState, outcome: LoopOutcome, *, completed: bool) -> Verdict:
    """What happens to the goal after a segment that spent ``outcome.cost_micros`` (a pure function).
    ``goal`` is the state *before* the segment."""
    spent = goal.spent_micros + outcome.cost_micros
    segments = goal.segments + 1
    if completed:
        return Verdict(GoalStatus.DONE, "goal_complete called")
    if goal.budget_micros - spent < MIN_SEGMENT_MICROS:
        return Verdict(GoalStatus.BUDGET_SPENT, f"{_usd(spent)} of {_usd(goal.budget_micros)} spent")
    if outcome.kind in {OutcomeKind.FAILED, OutcomeKind.HANDOFF, OutcomeKind.HANDED_BACK}:
        return Verdict(GoalStatus.STOPPED, f"segment ended {outcome.kind.value}")
    if outcome.kind is OutcomeKind.ABORTED and outcome.abort_reason in _STOPPING_ABORTS:
        return Verdict(GoalStatus.STOPPED, f"segment aborted ({outcome.abort_reason})")
    if segments >= MAX_SEGMENTS:
        return Verdict(GoalStatus.STOPPED, f"{MAX_SEGMENTS} segments run")
    return Verdict(GoalStatus.ACTIVE, "continues")


class GoalTools:
    """``goal_complete`` (ends the goal) and the 80% nudge of the segment's budget."""

    def __init__(self, segment_budget_micros: int) -> None:
        self._nudge_at = int(segment_budget_micros * NUDGE_FRACTION)
        self._segment = segment_budget_micros
        self._spent: Callable[[], int] = lambda: 0
        self.nudged = False
        self.report: str | None = None

    def watch(self, spent: Callable[[], int]) -> None:
        """Where the run's cost so far is read (``AgentLoop.cost_micros``)."""
        self._spent = spent

    async def before_call(self, ctx: CallContext, call: ToolCallRequest) -> ToolOutcome | None:
        if call.name != GOAL_COMPLETE:
            return None
        report = str(call.arguments.get("report", "")).strip() or "Goal complete."
        self.report = report
        ctx.stop = StopRequest(OutcomeKind.FINISHED, final_text=report, detail="goal complete")
        return ToolOutcome(call.id, call.name, "Goal marked complete.")

    async def after_call(self, ctx: CallContext, call: ToolCallRequest, outcome: ToolOutcome) -> ToolOutcome:
        spent = self._spent()
        if not self.nudged and self._segment > 0 and spent >= self._nudge_at:
            self.nudged = True
            ctx.guard("goal_budget_nudge", f"{_usd(spent)} of the segment's {_usd(self._segment)} spent")
            ctx.note(
                f"[Budget] This segment has used {_usd(spent)} of its {_usd(self._segment)} budget (80%). "
                f"Wrap up cleanly now: finish the current step, then call {GOAL_COMPLETE} if the goal is achieved, "
                "or end with a short progress note."
            )
        return outcome


def _usd(micros: int) -> str:
    return f"${Decimal(micros) / MICROS_PER_USD:.2f}"
