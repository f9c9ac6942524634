"""What a slash command (or the conversation's state) changes about one run [002 "I comandi slash"].

:meth:`TurnPlanner.prepare` reads the run's inbound text and the conversation's state and
answers a :class:`Turn`: the subject with the command stripped from the inbound text (the
model sees ``make a plan for X``, not ``/plan make a plan for X``), the run mode and its
contract, a **Directive** layer (right after the Run contract), the tools (plan: read-only),
local tools (``submit_plan``, ``goal_complete``), a cost budget (goal segments), extra
interceptors, and how the outcome is settled. Or a ``reply`` that ends the run at once
without a model call (``/plan off``, an unknown skill).

- ``/plan [text]`` switches the conversation to plan mode (persisted); every later turn is a
  plan turn until ``/plan off`` (``services.runner.plan``).
- ``/goal <text> [--budget N]`` and ``/loop [text]`` start a goal (replacing an active one), ``/goal stop``
  or ``/loop off`` stops it; a ``pipelineStep`` wake whose
  ``pipeline_run_id`` is an active goal of the conversation is its next segment
  (``services.runner.goals``).
- ``/skill:<name> [text]`` (or a bare legacy skill name) makes the skill's body the directive of
  this turn; a skill the version does not grant, or without a body, gets a clear reply.
- ``/todo`` and ``/compact`` never get here as text (ingest handles them).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from services.runner.budget import RunLimits
from services.runner.context import ContextBuilder, DraftBuilder, RunMode
from services.runner.goals import (
    GOAL_COMPLETE_SPEC,
    LOOP_DEFAULT_TEXT,
    SEGMENT_BUDGET_MICROS,
    GoalState,
    GoalTools,
    budget_micros,
    verdict,
)
from services.runner.interceptors import ToolInterceptor
from services.runner.outcome import LoopOutcome, OutcomeKind
from services.runner.plan import PLAN_OFF_WORDS, SUBMIT_PLAN_SPEC, PlanRecorder, read_only
from services.runner.providers.base import ToolSpec
from services.runner.slash_store import SlashStore
from services.runner.subject import RunSubject
from switchboard.contracts.enums import WakeReason
from switchboard.db.models.slash import ConversationMode, GoalKind
from switchboard.observability.logging import get_logger
from switchboard.slash_commands import CommandName, ParseError, SlashCommand, parse

log = get_logger(__name__)

# ``/goal stop`` and ``/loop off`` end the conversation's active goal (the same words as ``/plan off``).
STOP_WORDS = PLAN_OFF_WORDS

DIRECTIVE = "Directive"


class DirectiveLayer:
    name = "directive"

    def __init__(self, text: str) -> None:
        self._text = text

    async def build(self, subject: RunSubject, draft: DraftBuilder) -> None:
        draft.layer(DIRECTIVE, self._text)


@dataclass
class Turn:
    subject: RunSubject
    mode: RunMode = RunMode.REPLY
    directive: str | None = None
    read_only: bool = False
    local_tools: tuple[ToolSpec, ...] = ()
    interceptors: tuple[ToolInterceptor, ...] = ()
    cost_budget_micros: int | None = None
    reply: LoopOutcome | None = None
    plan: PlanRecorder | None = None
    goal: GoalState | None = None
    goal_tools: GoalTools | None = None
    store: SlashStore | None = field(default=None, repr=False)

    def tools(self, granted: tuple[str, ...]) -> tuple[str, ...]:
        return read_only(granted) if self.read_only else granted

    def limits(self, limits: RunLimits) -> RunLimits:
        """A goal segment's cost budget replaces the version's per-run one (only /goal and /loop have one)."""
        if self.cost_budget_micros is None:
            return limits
        return replace(limits, cost_budget_micros=self.cost_budget_micros)

    def builders(self, builders: Sequence[ContextBuilder]) -> list[ContextBuilder]:
        """The builders with the Directive layer right after the Run contract."""
        out = list(builders)
        if not self.directive:
            return out
        at = next((i + 1 for i, b in enumerate(out) if b.name == "run_contract"), len(out))
        out.insert(at, DirectiveLayer(self.directive))
        return out

    def watch(self, cost_micros: Callable[[], int]) -> None:
        """Where the 80% nudge reads the run's cost so far (``AgentLoop.cost_micros``)."""
        if self.goal_tools is not None:
            self.goal_tools.watch(cost_micros)

    async def settle(self, outcome: LoopOutcome) -> LoopOutcome:
        if self.plan is not None:
            return self.plan.settle(outcome)
        if self.goal is not None and self.goal_tools is not None:
            return await self._end_segment(outcome)
        return outcome

    async def _end_segment(self, outcome: LoopOutcome) -> LoopOutcome:
        assert self.goal is not None and self.goal_tools is not None
        done = self.goal_tools.report is not None
        decided = verdict(self.goal, outcome, completed=done)
        if self.store is not None and not self.subject.request.dry_run:
            await self.store.end_segment(self.subject, self.goal, outcome, decided)
        spent = self.goal.spent_micros + outcome.cost_micros
        note = (
            f"Goal segment {self.goal.segments + 1}: {decided.status.value} ({decided.reason}); "
            f"{spent} of {self.goal.budget_micros} micro-USD spent."
        )
        log.info(
            "goal segment ended",
            extra={"run_id": str(self.subject.request.run_id), "status": decided.status.value, "spent_micros": spent},
        )
        return replace(outcome, summary=f"{outcome.summary} {note}" if outcome.summary else note)


def _strip(subject: RunSubject, text: str) -> RunSubject:
    """The subject with its inbound text replaced by what followed the command."""
    messages = subject.request.messages
    if not messages:
        return subject
    first = messages[0].model_copy(update={"text": text})
    return replace(subject, request=subject.request.model_copy(update={"messages": (first,)}))


def _reply(subject: RunSubject, text: str, summary: str) -> LoopOutcome:
    """A fixed acknowledgement of a command (no model call): sent as the answer — unless the
    command came through the API, which the customer never saw: then it stays in the run's summary."""
    if subject.command_via_api:
        return LoopOutcome(OutcomeKind.FINISHED, summary=f"{summary} Not sent (a command through the API): {text}")
    return LoopOutcome(OutcomeKind.ANSWERED, final_text=text, summary=summary)


class TurnPlanner:
    def __init__(self, store: SlashStore) -> None:
        self._store = store

    async def prepare(self, subject: RunSubject) -> Turn:
        command = self._command(subject)
        if command is not None and command.name is CommandName.PLAN:
            return await self._plan_command(subject, command)
        if command is not None and command.name in {CommandName.GOAL, CommandName.LOOP}:
            return await self._start_goal(subject, command)
        if command is not None and command.name is CommandName.SKILL:
            return await self._skill(subject, command)
        request = subject.request
        goal_id = request.wake_context.pipeline_run_id
        # A segment's recovery (its runner died, or handed it back at a shutdown) keeps the goal's id:
        # it is the segment again — the goal's budget and Directive, its accounting and next segment.
        segment = request.wake_reason in (WakeReason.PIPELINE_STEP, WakeReason.RECOVERY)
        if segment and goal_id is not None and subject.conversation:
            goal = await self._store.active_goal(subject, goal_id)
            if goal is not None:
                return self._goal_turn(subject, goal)
            if not request.messages and await self._store.goal_ended(subject, goal_id):
                # The next segment's wake of a goal stopped (or ended) after it was queued: the owner
                # pressed stop, so no turn at all — not an unbudgeted one whose reply reaches the customer.
                # (A wake folded with customer messages still answers them, as any turn.)
                return Turn(
                    subject,
                    reply=LoopOutcome(
                        OutcomeKind.FINISHED,
                        summary="Goal segment not run: its goal was stopped or ended before it; no model was called.",
                    ),
                )
        if subject.conversation is not None and await self._store.mode(subject) == ConversationMode.PLAN.value:
            return self._plan_turn(subject)
        return Turn(subject)

    @staticmethod
    def _command(subject: RunSubject) -> SlashCommand | None:
        text = subject.command_text
        if text is None or not text.lstrip().startswith("/"):
            return None  # no command, or a customer's text that only looks like one
        try:
            return parse(text, skills=subject.version.skills)
        except ParseError:
            return None  # answered before (services.runner.commands)

    # ------------------------------------------------------------------ plan

    async def _plan_command(self, subject: RunSubject, command: SlashCommand) -> Turn:
        persist = subject.conversation is not None and not subject.request.dry_run
        if command.text.strip().lower() in PLAN_OFF_WORDS:
            if persist:
                await self._store.set_mode(subject, None)
            return Turn(
                subject,
                reply=_reply(
                    subject,
                    "Plan mode is off: I will answer and act normally again.",
                    "/plan off: the conversation is back in reply mode; no model was called.",
                ),
            )
        if persist:
            await self._store.set_mode(subject, ConversationMode.PLAN.value)
        text = command.text or "(Plan mode is on: make a plan for what this conversation needs.)"
        return self._plan_turn(_strip(subject, text))

    def _plan_turn(self, subject: RunSubject) -> Turn:
        recorder = PlanRecorder()
        return Turn(
            subject,
            mode=RunMode.PLAN,
            read_only=True,
            local_tools=(SUBMIT_PLAN_SPEC,),
            interceptors=(recorder,),
            plan=recorder,
        )

    # ------------------------------------------------------------------ goals

    async def _start_goal(self, subject: RunSubject, command: SlashCommand) -> Turn:
        if command.text.strip().lower() in STOP_WORDS and command.budget_usd is None:
            stopped = await self._store.stop_goals(subject) if subject.conversation is not None else 0
            return Turn(
                subject,
                reply=_reply(
                    subject,
                    "Stopped the autonomous work." if stopped else "There is no autonomous work to stop.",
                    f"/{command.name.value} stop: {stopped} active goal(s) stopped; no model was called.",
                ),
            )
        kind = GoalKind.LOOP if command.name is CommandName.LOOP else GoalKind.GOAL
        text = command.text or LOOP_DEFAULT_TEXT
        budget = budget_micros(command.budget_usd)
        if subject.conversation is None or subject.request.dry_run:
            # A dry run (or a run without a conversation) works one segment and stores nothing.
            goal = GoalState(uuid.uuid4(), kind.value, text, budget, min(SEGMENT_BUDGET_MICROS, budget), 0, 0)
        else:
            goal = await self._store.start_goal(subject, kind=kind.value, goal=text, budget_micros=budget)
        return self._goal_turn(_strip(subject, text), goal)

    def _goal_turn(self, subject: RunSubject, goal: GoalState) -> Turn:
        tools = GoalTools(goal.this_segment_micros)
        return Turn(
            subject,
            mode=RunMode.GOAL,
            directive=goal.directive(),
            local_tools=(GOAL_COMPLETE_SPEC,),
            interceptors=(tools,),
            cost_budget_micros=goal.this_segment_micros,
            goal=goal,
            goal_tools=tools,
            store=self._store,
        )

    # ------------------------------------------------------------------ skills

    async def _skill(self, subject: RunSubject, command: SlashCommand) -> Turn:
        name = command.skill or ""
        granted = {s.lower(): s for s in subject.version.skills}
        known = ", ".join(f"/skill:{s}" for s in subject.version.skills) or "none"
        body = await self._store.skill_body(subject, granted[name]) if name in granted else None
        if body is None:
            why = "is not one of this agent's skills" if name not in granted else "has no instructions yet"
            return Turn(
                subject,
                reply=_reply(
                    subject,
                    f"Unknown skill {name!r}: it {why}. Skills you can use: {known}.",
                    f"Answered an unknown skill ({name!r} {why}) without calling the model.",
                ),
            )
        text = command.text or f"(Apply the skill {name!r} to this conversation.)"
        return Turn(_strip(subject, text), directive=f"Skill {name}:\n{body.strip()}")
