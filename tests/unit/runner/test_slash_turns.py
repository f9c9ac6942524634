"""Slash-command turns (issue 6 item 4): goal budgets and verdicts, the 80% nudge, plan settling, the Directive
layer's place — pure parts, no database."""

from __future__ import annotations

import uuid
from decimal import Decimal

import pytest

from services.runner.budget import RunLimits
from services.runner.context import default_builders
from services.runner.goals import (
    GOAL_BUDGET_MICROS,
    GOAL_COMPLETE,
    MAX_SEGMENTS,
    SEGMENT_BUDGET_MICROS,
    GoalState,
    GoalTools,
    budget_micros,
    verdict,
)
from services.runner.interceptors import CallContext
from services.runner.outcome import LOOPING, LoopOutcome, OutcomeKind, classify
from services.runner.plan import SUBMIT_PLAN, PlanRecorder, read_only
from services.runner.providers.base import ToolCallRequest, ToolOutcome
from services.runner.turns import DirectiveLayer, Turn
from switchboard.contracts.enums import ErrorFamily, RunStatus, Vitality
from switchboard.db.models.slash import GoalStatus
from switchboard.tool_catalog import CONVERSATION_HISTORY, SEARCH_CONTACTS, SEND_WHATSAPP_MESSAGE


def goal(budget: int = GOAL_BUDGET_MICROS, spent: int = 0, segments: int = 0) -> GoalState:
    return GoalState(uuid.uuid4(), "goal", "grow sales", budget, min(SEGMENT_BUDGET_MICROS, budget), spent, segments)


def call(name: str, **arguments: object) -> ToolCallRequest:
    return ToolCallRequest(id="c1", name=name, arguments=arguments, arguments_json="{}")


def test_default_budgets_are_five_dollars_a_segment_and_fifty_a_goal() -> None:
    assert budget_micros(None) == 50_000_000
    assert budget_micros(Decimal("7.5")) == 7_500_000
    assert goal().this_segment_micros == 5_000_000


@pytest.mark.parametrize(
    ("budget", "spent", "segment"),
    [(50_000_000, 0, 5_000_000), (50_000_000, 47_000_000, 3_000_000), (2_000_000, 0, 2_000_000), (1, 1, 0)],
)
def test_a_segment_never_gets_more_than_what_is_left_of_the_goal(budget: int, spent: int, segment: int) -> None:
    state = goal(budget, spent)
    assert state.this_segment_micros == segment
    assert state.spent_micros + state.this_segment_micros <= state.budget_micros


def test_the_segment_budget_replaces_the_run_cost_budget_only_for_goals() -> None:
    limits = RunLimits(
        max_steps=5, token_budget=10_000, cost_budget_micros=500_000, max_output_tokens=1024, min_output_tokens=64
    )
    assert Turn(subject=None).limits(limits) == limits  # type: ignore[arg-type]
    assert Turn(subject=None, cost_budget_micros=5_000_000).limits(limits).cost_budget_micros == 5_000_000  # type: ignore[arg-type]


def test_verdicts() -> None:
    answered = LoopOutcome(OutcomeKind.ANSWERED, final_text="progress", cost_micros=1_000_000)
    assert verdict(goal(), answered, completed=True).status is GoalStatus.DONE
    assert verdict(goal(), answered, completed=False).continues
    assert verdict(goal(2_000_000, 1_000_000), answered, completed=False).status is GoalStatus.BUDGET_SPENT
    assert verdict(goal(segments=MAX_SEGMENTS - 1), answered, completed=False).status is GoalStatus.STOPPED
    looping = LoopOutcome(OutcomeKind.ABORTED, abort_reason=LOOPING)
    assert verdict(goal(), looping, completed=False).status is GoalStatus.STOPPED
    # A segment stopped by its own cost budget is the normal way a long goal moves on.
    spent_segment = LoopOutcome(OutcomeKind.ABORTED, abort_reason="cost_budget_exceeded", cost_micros=4_900_000)
    assert verdict(goal(), spent_segment, completed=False).continues
    # A refusal is no passing failure: the next segment would be refused again, billed each time.
    refused = LoopOutcome(OutcomeKind.ABORTED, abort_reason="answer_refused", cost_micros=20_000)
    assert verdict(goal(), refused, completed=False).status is GoalStatus.STOPPED


async def test_the_nudge_comes_once_at_eighty_percent_of_the_segment() -> None:
    tools = GoalTools(1_000_000)
    spent = {"now": 790_000}
    tools.watch(lambda: spent["now"])
    ctx = CallContext(step=1, offered={})
    result = ToolOutcome("c1", SEARCH_CONTACTS, "[]")
    await tools.after_call(ctx, call(SEARCH_CONTACTS), result)
    assert not ctx.notes and not tools.nudged
    spent["now"] = 800_000
    await tools.after_call(ctx, call(SEARCH_CONTACTS), result)
    await tools.after_call(ctx, call(SEARCH_CONTACTS), result)
    assert len(ctx.notes) == 1 and "80%" in ctx.notes[0] and GOAL_COMPLETE in ctx.notes[0]
    assert [name for name, _ in ctx.guard_events] == ["goal_budget_nudge"]


async def test_goal_complete_ends_the_run_with_its_report() -> None:
    tools = GoalTools(1_000_000)
    ctx = CallContext(step=1, offered={})
    outcome = await tools.before_call(ctx, call(GOAL_COMPLETE, report="3 leads answered"))
    assert outcome is not None and not outcome.is_error
    assert ctx.stop is not None and ctx.stop.final_text == "3 leads answered" and tools.report == "3 leads answered"


def test_plan_mode_offers_only_read_tools() -> None:
    granted = (SEARCH_CONTACTS, SEND_WHATSAPP_MESSAGE, CONVERSATION_HISTORY, "unknown_tool")
    assert read_only(granted) == (SEARCH_CONTACTS, CONVERSATION_HISTORY)


async def test_a_submitted_plan_is_the_answer_and_no_plan_is_an_empty_run() -> None:
    recorder = PlanRecorder()
    ctx = CallContext(step=1, offered={})
    assert (await recorder.before_call(ctx, call(SUBMIT_PLAN, plan=" "))).is_error  # type: ignore[union-attr]
    await recorder.before_call(ctx, call(SUBMIT_PLAN, plan="1. call Ana"))
    finished = recorder.settle(LoopOutcome(OutcomeKind.FINISHED, final_text="1. call Ana"))
    assert finished.final_text == "1. call Ana" and "Plan submitted" in (finished.summary or "")
    assert classify(finished).vitality is Vitality.COMPLETED

    chatty = PlanRecorder().settle(LoopOutcome(OutcomeKind.ANSWERED, final_text="Sure, I will do it!"))
    assert chatty.final_text is None and "no plan was submitted" in (chatty.summary or "")
    assert "Sure, I will do it!" in (chatty.summary or "")
    assert classify(chatty) == classify(LoopOutcome(OutcomeKind.ANSWERED))
    assert (classify(chatty).status, classify(chatty).vitality, classify(chatty).error_family) == (
        RunStatus.COMPLETED,
        Vitality.EMPTY,
        ErrorFamily.SILENT_RUN,
    )


def test_the_directive_layer_follows_the_run_contract() -> None:
    builders = Turn(subject=None, directive="Skill pricing: quote list prices").builders(default_builders())  # type: ignore[arg-type]
    names = [b.name for b in builders]
    assert names[names.index("run_contract") + 1] == "directive"
    assert isinstance(builders[names.index("directive")], DirectiveLayer)
    assert "directive" not in [b.name for b in Turn(subject=None).builders(default_builders())]  # type: ignore[arg-type]
