"""The conversation's state (docs/memory.md "State"): a note written with the local ``state_note`` tool in
one run is the State layer of the next run's prompt, while the earlier run's tool results stay in its
trace and never reach a later prompt."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from services.runner.plan import SUBMIT_PLAN
from services.runner.state import LABEL
from switchboard.db.models.memory import STATE_NOTE_TOOL
from switchboard.tool_catalog import SEARCH_CONTACTS
from tests.integration.runner.harness import RunnerHarness, command, create_agent, inbound, run_request
from tests.support.fake_llm import Received, Reply, tool

pytestmark = pytest.mark.integration

NOTE = "Customer wants the blue sofa, budget 500 EUR; delivery address still missing."


def _tool_results(received: Received) -> list[str]:
    """The tool result texts of one provider request (Anthropic format)."""
    out: list[str] = []
    for message in received.body.get("messages", []):
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") != "tool_result":
                continue
            inner: Any = block.get("content")
            if isinstance(inner, str):
                out.append(inner)
            else:
                out += [b.get("text", "") for b in inner or [] if isinstance(b, dict)]
    return [text for text in out if text.strip()]


def _layers(row: Any) -> dict[str, str]:
    assert row.prompt is not None
    return {layer["label"]: layer["text"] for layer in row.prompt["layers"]}


async def test_a_note_carries_over_as_the_state_layer_and_tool_results_do_not(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, tool_ids=[SEARCH_CONTACTS, STATE_NOTE_TOOL])
    rh.fake.script(
        [
            tool(SEARCH_CONTACTS, {"query": "Ana"}),
            tool(STATE_NOTE_TOOL, {"text": NOTE}),
            Reply(text="Noted, which address should we deliver to?"),
        ]
    )
    first_call = len(rh.fake.received)
    run1 = await rh.run(run_request(agent, [inbound(rh.db, agent, "I want the blue sofa, up to 500 EUR")]))
    assert run1.status == "completed", run1.error_message
    assert LABEL not in _layers(run1)  # no note yet
    traced = [e.get("tool_name") for e in run1.tool_calls]  # the trace keeps every call
    assert SEARCH_CONTACTS in traced and STATE_NOTE_TOOL in traced
    assert STATE_NOTE_TOOL in run1.prompt["tools"]
    run1_results = [r for received in rh.fake.received[first_call:] for r in _tool_results(received)]
    assert any("Ana" in r or "contact" in r for r in run1_results) and "State note saved." in run1_results
    assert (
        rh.scalar(
            agent.org_id,
            "SELECT note FROM conversation_state_notes WHERE conversation_id = :c",
            c=agent.conversation_id,
        )
        == NOTE
    )

    rh.fake.script([Reply(text="Thanks, delivering to Via Roma 1.")])
    second_call = len(rh.fake.received)
    run2 = await rh.run(run_request(agent, [inbound(rh.db, agent, "Via Roma 1, Milano")]))
    assert run2.status == "completed", run2.error_message
    layers = list(_layers(run2))
    assert _layers(run2)[LABEL].endswith(NOTE)
    assert layers.index(LABEL) == layers.index("Memory" if "Memory" in layers else "Wake context") + 1
    (request2,) = rh.fake.received[second_call:]
    sent = json.dumps(request2.body)
    assert json.dumps(NOTE)[1:-1] in sent
    # Run 1's tool chatter (the search result, the tool's acknowledgement) stays in run 1's trace.
    for result in run1_results:
        assert json.dumps(result)[1:-1] not in sent, result
    assert _tool_results(request2) == []


async def test_without_the_grant_there_is_no_state_tool(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, tool_ids=[SEARCH_CONTACTS])
    rh.fake.script([Reply(text="Hi!")])
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "hello")]))
    assert row.status == "completed" and STATE_NOTE_TOOL not in row.prompt["tools"]
    assert STATE_NOTE_TOOL not in json.dumps(row.prompt["layers"])


async def test_plan_mode_does_not_offer_the_state_tool(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, tool_ids=[SEARCH_CONTACTS, STATE_NOTE_TOOL])
    rh.fake.script([tool(SUBMIT_PLAN, {"plan": "1. Ask the address."})])
    row = await rh.run(run_request(agent, [command(rh.db, agent, "/plan win back the customer")]))
    assert row.prompt is not None and SUBMIT_PLAN in row.prompt["tools"]
    assert STATE_NOTE_TOOL not in row.prompt["tools"]


async def test_a_dry_run_saves_no_state_note(rh: RunnerHarness) -> None:
    """A test run changes nothing a later live turn reads: its note is not saved, and says so."""
    agent = create_agent(rh.db, tool_ids=[STATE_NOTE_TOOL])
    rh.fake.script([tool(STATE_NOTE_TOOL, {"text": "The customer wants the blue sofa."}), Reply(text="Ok.")])
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Quero o sofá azul")], dry_run=True))
    assert row.status == "completed" and row.is_dry_run
    result = next(e for e in row.tool_calls if e["kind"] == "tool")["result"]
    assert "not_saved" in result
    assert rh.scalar(agent.org_id, "SELECT count(*) FROM conversation_state_notes") == 0


async def test_a_run_closed_as_lost_writes_no_note(rh: RunnerHarness) -> None:
    """The dispatcher closed a run as lost while its runner still worked (its heartbeats stopped
    reaching anyone): its recovery may have written a newer note, and the contact may have been
    erased since — a late note would put the person's data back. It is refused."""
    agent = create_agent(rh.db, tool_ids=[STATE_NOTE_TOOL])
    request = run_request(agent, [inbound(rh.db, agent, "I want the blue sofa")])

    def script(received: Received) -> Reply:
        if not _tool_results(received):  # the first step: closed as lost while the model thinks
            rh.scalar(
                agent.org_id,
                "UPDATE ai_agent_runs SET status = 'failed', error_code = 'process_lost' WHERE id = :r RETURNING id",
                r=request.run_id,
            )
            return tool(STATE_NOTE_TOOL, {"text": NOTE})
        return Reply(text="ok")

    rh.fake.script(script)
    await rh.submit(request)
    deadline = asyncio.get_running_loop().time() + 20
    while not (rh.fake.received and any("Not saved" in r for r in _tool_results(rh.fake.received[-1]))):
        assert asyncio.get_running_loop().time() < deadline, "the tool never answered"
        await asyncio.sleep(0.1)
    notes = rh.scalar(
        agent.org_id,
        "SELECT count(*) FROM conversation_state_notes WHERE conversation_id = :c",
        c=agent.conversation_id,
    )
    assert notes == 0
