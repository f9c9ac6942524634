"""Each scenario of ``make demo``, asserted with every service running as its own process.

Real API (signed WAHA webhook in, outbox relay), dispatcher, runner (the built-in demo
model, the real MCP tool server), notifier (sending through the local WAHA-compatible
channel server) and brief, over a real broker and PostgreSQL. The scenario code is the
demo's (scripts/demo/scenario.py, owner.py); these tests assert on what it observed, and that
every expectation it checked held.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest

from scripts.demo.owner import home_digest, morning_push, propose_and_approve, slash_todo, todo_items
from scripts.demo.report import Outcome
from scripts.demo.scenario import (
    HISTORY_TOOL,
    TERMINAL,
    ScenarioResult,
    Stage,
    budget_limited,
    burst,
    handoff,
    tool_call_names,
    tool_question,
)


def _expectations_held(stage: Stage, name: str) -> None:
    failed = [e for e in stage.report.expectations if e.scenario == name and e.outcome is Outcome.FAILED]
    assert not failed, failed


@pytest.fixture(scope="module")
async def proposal(stage: Stage) -> ScenarioResult:
    """The catalog request, its proposal and approval: played once, its chat reused by the /todo test."""
    return await propose_and_approve(stage)


async def test_a_question_is_answered_after_a_tool_call_and_the_reply_arrives_once(stage: Stage) -> None:
    result = await tool_question(stage)
    [run] = result.runs
    assert run["status"] == "completed" and tool_call_names(run) == [HISTORY_TOOL]
    assert [r["text"] for r in result.replies] == [run["final_text"]]  # exactly once
    assert "not an AI" in run["final_text"]
    _expectations_held(stage, result.name)


async def test_a_burst_of_three_is_answered_by_one_follow_up_run(stage: Stage) -> None:
    result = await burst(stage)
    first, follow_up = result.runs  # two runs, never three
    assert first["inbound_message_ids"] == result.message_ids[:1]
    assert sorted(follow_up["inbound_message_ids"]) == sorted(result.message_ids[1:])
    assert datetime.fromisoformat(first["completed_at"]) <= datetime.fromisoformat(follow_up["started_at"])
    assert sorted(r["text"] for r in result.replies) == sorted([first["final_text"], follow_up["final_text"]])
    _expectations_held(stage, result.name)


async def test_falar_com_humano_hands_off_without_a_reply(stage: Stage) -> None:
    result = await handoff(stage)
    [run] = result.runs
    assert run["status"] == "handoff" and run["steps_count"] == 0
    assert result.conversation is not None and result.conversation["status"] == "handoff"
    assert result.conversation["handoff_at"] is not None
    assert result.replies == []
    _expectations_held(stage, result.name)


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
    _expectations_held(stage, result.name)


async def test_a_write_proposed_under_propose_autonomy_lands_on_home_and_is_approved_once(
    stage: Stage, proposal: ScenarioResult
) -> None:
    [run] = proposal.runs
    decision = proposal.details["decision"]
    assert run["status"] == "completed" and decision["run_id"] == run["id"]
    assert (decision["action_type"], decision["autonomy_tier"]) == ("crm_send_whatsapp_message", "propose")
    text = decision["proposed_action"]["arguments"]["text"]
    assert "not an AI" in text
    # Before the approval the customer got the run's answer only, never the proposed message.
    assert [r["text"] for r in proposal.replies] == [run["final_text"]] and "approve" in run["final_text"]
    assert proposal.details["approvals"] == [200, 409]  # executed by the first approval, refused the second time
    [outbound] = proposal.details["outbound"]  # one message recorded, whatever happens to delivery
    # Approved after the run ended, the message still reaches the customer, exactly once.
    assert [d["text"] for d in proposal.details["delivered"]] == [text]
    assert outbound["delivery_status"] in {"sent", "delivered", "read"}  # the channel's receipts move it on
    assert [e.what for e in stage.report.skipped if e.scenario == proposal.name] == []
    _expectations_held(stage, proposal.name)


async def test_todo_slash_command_adds_a_home_item_and_is_never_a_message(
    stage: Stage, proposal: ScenarioResult
) -> None:
    conversation = str(proposal.runs[0]["conversation_id"])
    result = await slash_todo(stage, proposal.chat_id, conversation)
    first, again = result.details["webhook"]
    assert (first["reason"], first["message_id"], first["dispatched"], first["duplicate"]) == (
        "slash_todo",
        None,
        False,
        False,
    )
    assert again["duplicate"] is True
    [item] = result.details["todo"]
    assert item["text"] == result.details["item"] and item["conversation_id"] == conversation
    assert item["source"] == "slash_command"
    assert result.details["stored"] == []
    _expectations_held(stage, result.name)


async def test_the_home_digest_counts_every_run_and_handoff_and_lists_the_todo(stage: Stage) -> None:
    response = await stage.api.get("/api/v1/runs", params={"limit": 200}, headers=stage.org.headers())
    runs = [r for r in response.json()["data"] if r["status"] in TERMINAL and not r["is_dry_run"]]
    handoffs = sum(r["status"] == "handoff" for r in runs)
    digest = await home_digest(stage, len(runs), handoffs)
    assert digest["pulse"]["runs"] == len(runs) and digest["pulse"]["handoffs"] == handoffs
    assert {"todo", "pulse", "done", "planets"} <= set(digest["sections"])
    if any(e.scenario == "/todo" for e in stage.report.expectations):  # the /todo test ran before
        assert any(i["source"] == "slash_command" for i in todo_items(digest, "todo"))
    _expectations_held(stage, "home digest")


async def test_the_morning_push_tells_the_owners_webhook_once_signed(stage: Stage) -> None:
    """The notifier process sends the day's digest to the org webhook once its hour comes (the
    script sets the hour to now); the channel server's owner inbox records it."""
    digest = await home_digest(stage, 0, 0)
    data = await morning_push(stage, digest)
    assert data is not None and data["date"] == digest["date"]
    assert data["digest"]["sections"] == digest["sections"]
    assert data["summary"].endswith("for you.")
    _expectations_held(stage, "morning push")


async def test_the_channels_echo_and_receipts_leave_one_reply_marked_read(stage: Stage) -> None:
    """The channel server calls back as WAHA does: the ``message.any`` echo of each reply (racing the
    send's answer) and its receipts. The conversation keeps the reply once, the agent's, and read."""
    result = await tool_question(stage)
    [run] = result.runs
    conversation = f"/api/v1/conversations/{run['conversation_id']}/messages"
    deadline = asyncio.get_running_loop().time() + 20
    while True:
        response = await stage.api.get(conversation, params={"limit": 50}, headers=stage.org.headers())
        outbound = [m for m in response.json()["data"] if m["direction"] == "outbound"]
        if [m["delivery_status"] for m in outbound] == ["read"] or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.25)
    assert [(m["sender"], m["body"], m["delivery_status"]) for m in outbound] == [
        ("agent", run["final_text"], "read")
    ], outbound
