"""Each scenario of ``make demo``, asserted with every service running as its own process.

Real API (signed WAHA webhook in, outbox relay), dispatcher, runner (the built-in demo
model, the real MCP tool server), notifier (sending through the local WAHA-compatible
channel server) and brief, over a real broker and PostgreSQL. The scenario code is the
demo's (scripts/demo/scenario.py); these tests assert on what it observed, and that
every expectation it checked held.
"""

from __future__ import annotations

from datetime import datetime

from scripts.demo.report import Outcome
from scripts.demo.scenario import (
    HISTORY_TOOL,
    ScenarioResult,
    Stage,
    budget_limited,
    burst,
    handoff,
    tool_call_names,
    tool_question,
)


def _expectations_held(stage: Stage, result: ScenarioResult) -> None:
    failed = [e for e in stage.report.expectations if e.scenario == result.name and e.outcome is Outcome.FAILED]
    assert not failed, failed


async def test_a_question_is_answered_after_a_tool_call_and_the_reply_arrives_once(stage: Stage) -> None:
    result = await tool_question(stage)
    [run] = result.runs
    assert run["status"] == "completed" and tool_call_names(run) == [HISTORY_TOOL]
    assert [r["text"] for r in result.replies] == [run["final_text"]]  # exactly once
    assert "not an AI" in run["final_text"]
    _expectations_held(stage, result)


async def test_a_burst_of_three_is_answered_by_one_follow_up_run(stage: Stage) -> None:
    result = await burst(stage)
    first, follow_up = result.runs  # two runs, never three
    assert first["inbound_message_ids"] == result.message_ids[:1]
    assert sorted(follow_up["inbound_message_ids"]) == sorted(result.message_ids[1:])
    assert datetime.fromisoformat(first["completed_at"]) <= datetime.fromisoformat(follow_up["started_at"])
    assert sorted(r["text"] for r in result.replies) == sorted([first["final_text"], follow_up["final_text"]])
    _expectations_held(stage, result)


async def test_falar_com_humano_hands_off_without_a_reply(stage: Stage) -> None:
    result = await handoff(stage)
    [run] = result.runs
    assert run["status"] == "handoff" and run["steps_count"] == 0
    assert result.conversation is not None and result.conversation["status"] == "handoff"
    assert result.conversation["handoff_at"] is not None
    assert result.replies == []
    _expectations_held(stage, result)


async def test_the_budget_limited_agent_is_aborted_for_its_budget(stage: Stage) -> None:
    result = await budget_limited(stage)
    [run] = result.runs
    assert run["agent_id"] == stage.org.agents["Pedidos (budget-limited)"].id  # the higher priority won
    assert (run["status"], run["abort_reason"], run["error_family"]) == (
        "aborted",
        "max_steps_reached",
        "budgetExceeded",
    )
    assert tool_call_names(run) == [HISTORY_TOOL]  # its one step was the tool call
    assert result.replies == []
    _expectations_held(stage, result)
