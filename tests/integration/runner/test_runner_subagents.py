"""Sub-agents end to end (issue 6 item 9): a granted agent runs as a tool inside the same run.

Real broker and database, the real MCP server, the official Anthropic SDK against the fake provider.
The script tells the agents apart by their system prompts.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from sqlalchemy import text, update
from sqlalchemy.orm import Session

from services.api.runs.service import trace_steps
from switchboard.contracts import RunCompleted
from switchboard.contracts.enums import SteeringKind
from switchboard.db.models import AiAgent, AiAgentVersion
from switchboard.db.session import tenant_transaction
from switchboard.settings import KafkaSettings
from switchboard.tool_catalog import SEARCH_CONTACTS
from tests.integration.runner.harness import Agent, RunnerHarness, create_agent, harness, inbound, run_request
from tests.support.agents import create_agent as api_create_agent
from tests.support.agents import error_body, make_channel, version_body
from tests.support.api import create_org
from tests.support.fake_llm import Received, Reply, tool
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration


def sub_agent(rh: RunnerHarness, parent: Agent, name: str, *, model: str = "claude-haiku-4-5", **kw: Any) -> Agent:
    """Another published agent of the parent's org, named ``name`` (its system prompt says who it is)."""
    agent = create_agent(rh.db, org_id=parent.org_id, model=model, system_prompt=f"You are {name}.", api_key=None, **kw)
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        session.execute(
            update(AiAgentVersion)
            .where(AiAgentVersion.id == agent.version_id)
            .values(credential_id=parent.credential_id)  # the parent's key (one live label per org)
        )
        session.execute(
            update(AiAgent).where(AiAgent.id == agent.agent_id).values(name=name, published_version_id=agent.version_id)
        )
    return agent


def grant(rh: RunnerHarness, agent: Agent, subs: Sequence[Agent]) -> None:
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        session.execute(
            update(AiAgentVersion)
            .where(AiAgentVersion.id == agent.version_id)
            .values(subagent_ids=[s.agent_id for s in subs])
        )


def system_of(received: Received) -> str:
    return "".join(block["text"] for block in received.body.get("system", []))


def has_tool_result(received: Received) -> bool:
    return any(
        isinstance(m["content"], list) and any(b.get("type") == "tool_result" for b in m["content"])
        for m in received.body["messages"]
    )


def tool_names(received: Received) -> list[str]:
    return [t["name"] for t in received.body.get("tools", [])]


def price(rh: RunnerHarness, model: str) -> tuple[int, int]:
    with rh.db.connect() as conn:
        row = conn.execute(
            text("SELECT input_price_micros_per_mtok, output_price_micros_per_mtok FROM ai_models WHERE model = :m"),
            {"m": model},
        ).one()
    return int(row[0]), int(row[1])


async def test_subagent_tokens_and_cost_are_the_parent_runs(rh: RunnerHarness) -> None:
    parent = create_agent(rh.db, model="claude-haiku-4-5", system_prompt="You are the orchestrator.")
    stock = sub_agent(rh, parent, "Stock checker", model="claude-sonnet-4-6")
    grant(rh, parent, [stock])

    def script(received: Received) -> Reply:
        if "You are Stock checker." in system_of(received):
            return Reply(text="3 units of item 42 in stock.", input_tokens=300, output_tokens=40)
        if has_tool_result(received):
            return Reply(text="Temos 3 unidades do item 42.", input_tokens=500, output_tokens=30)
        return tool("agent_stock_checker", {"task": "How many units of item 42 are in stock?"}, input_tokens=400)

    rh.fake.script(script)
    before = len(rh.fake.received)
    request = run_request(parent, [inbound(rh.db, parent, "Vocês têm o item 42?")])
    row = await rh.run(request)

    assert row.status == "completed", (row.error_code, row.summary)
    assert row.final_text == "Temos 3 unidades do item 42."
    calls = rh.fake.received[before:]
    assert len(calls) == 3
    parent_calls = [c for c in calls if "orchestrator" in system_of(c)]
    sub_calls = [c for c in calls if "You are Stock checker." in system_of(c)]
    assert len(parent_calls) == 2 and len(sub_calls) == 1
    assert "agent_stock_checker" in tool_names(parent_calls[0])
    # The sub-agent got the task as its message and is told it is a delegated task, not the customer.
    assert sub_calls[0].body["messages"][0]["content"] == "How many units of item 42 are in stock?"
    assert "delegated task" in system_of(sub_calls[0])

    # Totals: the parent's two calls (haiku) + the sub-agent's one (sonnet, its own price).
    haiku_in, haiku_out = price(rh, "claude-haiku-4-5")
    sonnet_in, sonnet_out = price(rh, "claude-sonnet-4-6")
    parent_cost = ((400 + 500) * haiku_in + (20 + 30) * haiku_out) // 1_000_000
    sub_cost = (300 * sonnet_in + 40 * sonnet_out) // 1_000_000
    assert sub_cost > 0
    assert row.tokens_in == 400 + 500 + 300 and row.tokens_out == 20 + 30 + 40
    assert row.cost_micros == parent_cost + sub_cost
    completed = [r for _, r in rh.outbox(parent.conversation_id) if isinstance(r, RunCompleted)]
    assert len(completed) == 1
    assert completed[0].tokens_in == 1200 and completed[0].tokens_out == 90
    assert completed[0].cost_micro_usd == parent_cost + sub_cost
    assert completed[0].final_text == "Temos 3 unidades do item 42."

    # The trace: the sub-agent's model call marked with its id, then the tool result in the parent's trace.
    marked = [e for e in row.tool_calls if e.get("subagent_id") == str(stock.agent_id)]
    assert [e["kind"] for e in marked] == ["model"] and marked[0]["subagent_depth"] == 1
    assert marked[0]["tokens_in"] == 300
    delegated = next(e for e in row.tool_calls if e["kind"] == "tool" and e["tool_name"] == "agent_stock_checker")
    assert "3 units of item 42" in delegated["result"] and delegated["is_error"] is False
    # The runs API's typed trace shows the mark too.
    shown = [step for step in trace_steps(row.tool_calls) if step.subagent_id == str(stock.agent_id)]
    assert [step.kind.value for step in shown] == ["model"] and shown[0].model is not None
    # One run, one reply: no other run row was created for the sub-agent.
    assert rh.scalar(parent.org_id, "SELECT count(*) FROM ai_agent_runs WHERE agent_id = :a", a=stock.agent_id) == 0


async def test_depth_is_bounded_and_a_subagent_cannot_call_its_caller(rh: RunnerHarness) -> None:
    a = create_agent(rh.db, system_prompt="You are Alpha.")
    b = sub_agent(rh, a, "Bravo")
    c = sub_agent(rh, a, "Charlie")
    d = sub_agent(rh, a, "Delta")
    grant(rh, a, [b])
    grant(rh, b, [c, a])  # Alpha is Bravo's caller here: never offered to it
    grant(rh, c, [d])  # Charlie runs at depth 2: offered no sub-agents at all

    def script(received: Received) -> Reply:
        system = system_of(received)
        done = has_tool_result(received)
        if "You are Charlie." in system:
            return Reply(text="charlie-done")
        if "You are Bravo." in system:
            return Reply(text="bravo got charlie-done") if done else tool("agent_charlie", {"task": "go deeper"})
        return Reply(text="final answer") if done else tool("agent_bravo", {"task": "ask bravo"})

    rh.fake.script(script)
    before = len(rh.fake.received)
    row = await rh.run(run_request(a, [inbound(rh.db, a, "Oi")]))

    assert row.status == "completed" and row.final_text == "final answer"
    calls = rh.fake.received[before:]
    offered = {
        name: tool_names(next(c for c in calls if f"You are {name}." in system_of(c)))
        for name in ("Alpha", "Bravo", "Charlie")
    }
    assert offered["Alpha"] == ["agent_bravo"]
    assert offered["Bravo"] == ["agent_charlie"]  # not agent_alpha (its caller)
    assert not [t for t in offered["Charlie"] if t.startswith("agent_")]  # depth 2: no further delegation
    assert not [c for c in calls if "You are Delta." in system_of(c)]
    depths = {e["subagent_id"]: e["subagent_depth"] for e in row.tool_calls if "subagent_id" in e}
    assert depths == {str(b.agent_id): 1, str(c.agent_id): 2}
    # Five model calls (Alpha 2, Bravo 2, Charlie 1), all summed into the one run.
    assert len(calls) == 5
    assert row.tokens_in == 5 * 100 and row.tokens_out == 5 * 20


async def test_a_failing_subagent_is_an_error_result_and_the_run_goes_on(rh: RunnerHarness) -> None:
    parent = create_agent(rh.db, system_prompt="You are the boss.")
    worker = sub_agent(rh, parent, "Worker", max_steps=1, tool_ids=["crm_search_contacts"])
    grant(rh, parent, [worker])
    results: list[dict[str, Any]] = []

    def script(received: Received) -> Reply:
        if "You are Worker." in system_of(received):
            return tool("crm_search_contacts", {"query": "x"})  # always another step: max_steps stops it
        if has_tool_result(received):
            blocks = [b for m in received.body["messages"] if isinstance(m["content"], list) for b in m["content"]]
            results.extend(b for b in blocks if b.get("type") == "tool_result")
            return Reply(text="I could not check that now.")
        return tool("agent_worker", {"task": "search"})

    rh.fake.script(script)
    row = await rh.run(run_request(parent, [inbound(rh.db, parent, "Oi")]))

    assert row.status == "completed" and row.final_text == "I could not check that now."
    assert results and results[0].get("is_error") is True
    delegated = next(e for e in row.tool_calls if e["kind"] == "tool" and e["tool_name"] == "agent_worker")
    assert delegated["is_error"] is True and "max_steps_reached" in delegated["result"]
    # The worker's search ran (a read tool) and is in the trace, marked.
    assert [e["tool_name"] for e in row.tool_calls if e.get("subagent_id") and e["kind"] == "tool"] == [
        "crm_search_contacts"
    ]


async def test_agents_api_stores_and_validates_subagents_and_classification(
    rh: RunnerHarness, api: httpx.AsyncClient, stack: StackEndpoints
) -> None:
    org = create_org(stack.database_url)
    channel = make_channel(org)
    helper = await api_create_agent(api, org, channel)
    published = await api.post(
        f"/api/v1/agents/{helper['agent']['id']}:publish",
        json={"version_id": helper["version"]["id"]},
        headers=org.headers(),
    )
    assert published.status_code == 200, published.text
    unpublished = await api_create_agent(api, org, channel)
    elsewhere = create_agent(rh.db)  # another org's agent reads like a missing one

    main = await api_create_agent(api, org, channel, subagent_ids=[helper["agent"]["id"]], classification_enabled=True)
    assert main["version"]["subagent_ids"] == [helper["agent"]["id"]]
    assert main["version"]["classification_enabled"] is True
    main_id = main["agent"]["id"]

    for subs, code in (
        ([main_id], "subagent_self"),
        ([unpublished["agent"]["id"]], "subagent_not_published"),
        ([str(elsewhere.agent_id)], "unknown_subagent"),
    ):
        response = await api.post(
            f"/api/v1/agents/{main_id}/versions", json=version_body(channel, subagent_ids=subs), headers=org.headers()
        )
        assert response.status_code == 422, response.text
        assert [e["type"] for e in error_body(response)["details"]["errors"]] == [code]

    patched = await api.patch(
        f"/api/v1/agents/{main_id}/versions/{main['version']['id']}",
        json={"classification_enabled": False},
        headers=org.headers(),
    )
    assert patched.status_code == 200, patched.text
    data = patched.json()["data"]
    assert data["classification_enabled"] is False and data["subagent_ids"] == [helper["agent"]["id"]]


async def test_subagent_requests_are_pseudonymized_like_the_runs(rh: RunnerHarness) -> None:
    parent = create_agent(rh.db, system_prompt="You are the front desk.", contact_name="Ana Souza")
    notes = sub_agent(rh, parent, "Notes")
    grant(rh, parent, [notes])
    task = "Summarize what Ana Souza (ana.souza@example.com, +55 11 98765-4321) asked."

    def script(received: Received) -> Reply:
        if "You are Notes." in system_of(received):
            return Reply(text="She asked about item 42.")
        if has_tool_result(received):
            return Reply(text="Done.")
        return tool("agent_notes", {"task": task})  # a model that (wrongly) writes raw PII in the task

    rh.fake.script(script)
    before = len(rh.fake.received)
    row = await rh.run(run_request(parent, [inbound(rh.db, parent, "Oi, aqui é a Ana Souza")]))

    assert row.status == "completed" and row.final_text == "Done."
    sub_call = next(c for c in rh.fake.received[before:] if "You are Notes." in system_of(c))
    body = json.dumps(sub_call.body)
    assert "Souza" not in body and "ana.souza@example.com" not in body and "98765" not in body
    assert "<contact_1>" in sub_call.body["messages"][0]["content"]


async def test_a_subagents_spend_stays_with_the_run_when_it_is_handed_back(
    stack: StackEndpoints, migrated: None, topics: KafkaSettings
) -> None:
    """The runner stops (a deploy) while a sub-agent is on its second model call: the handed-back
    run still carries the sub-agent's first, billed step. Before, a sub-agent's usage joined the
    run only when its loop returned, so a stop in between dropped it from the row and the ledger."""
    async with harness(stack.database_url, topics, shutdown_grace_s=0.5) as h:
        parent = create_agent(h.db, model="claude-haiku-4-5", system_prompt="You are the orchestrator.")
        worker = sub_agent(h, parent, "Worker", tool_ids=[SEARCH_CONTACTS])
        grant(h, parent, [worker])

        def script(received: Received) -> Reply:
            if "You are Worker." in system_of(received):
                if has_tool_result(received):
                    return Reply(text="never in time", delay_s=5)
                return tool(SEARCH_CONTACTS, {"query": "Ana"}, input_tokens=300, output_tokens=30)
            return tool("agent_worker", {"task": "Find Ana"}, input_tokens=400, output_tokens=20)

        h.fake.script(script)
        request = run_request(parent, [inbound(h.db, parent, "Procura a Ana")])
        await h.submit(request)
        deadline = time.monotonic() + 20
        while sum("You are Worker." in system_of(r) for r in h.fake.received) < 2:  # on its second call
            assert time.monotonic() < deadline, "the sub-agent never reached its second call"
            await asyncio.sleep(0.05)
        await h.stop_runner()
        row = h.run_row(request)
        assert row is not None and row.error_code == "runner_shutdown"
        assert (row.tokens_in, row.tokens_out) == (400 + 300, 20 + 30)
        usage = h.usage(parent.org_id)
        assert usage is not None and (usage.input_tokens, usage.output_tokens) == (700, 50)
        marked = [e for e in row.tool_calls if e.get("subagent_id") == str(worker.agent_id)]
        assert "model" in [e["kind"] for e in marked], "the sub-agent's billed step is in the trace"


async def test_a_subagent_stops_when_its_calling_run_is_interrupted(rh: RunnerHarness) -> None:
    """A person takes the conversation over while the run's sub-agent works: the sub-agent stops at
    its next step with the run — it kept calling its model to the end of its budget, on a
    conversation a person now owns, and the run stopped only after it."""
    parent = create_agent(rh.db, model="claude-haiku-4-5", system_prompt="You are the orchestrator.")
    worker = sub_agent(rh, parent, "Digger", tool_ids=[SEARCH_CONTACTS], max_steps=20)
    grant(rh, parent, [worker])

    def script(received: Received) -> Reply:
        if "You are Digger." in system_of(received):
            return Reply(calls=tool(SEARCH_CONTACTS, {"query": "Ana"}).calls, delay_s=0.3)  # digs on and on
        return tool("agent_digger", {"task": "Find everything about Ana"})

    rh.fake.script(script)
    request = run_request(parent, [inbound(rh.db, parent, "Procura a Ana")])
    await rh.submit(request)
    deadline = time.monotonic() + 20
    while sum("You are Digger." in system_of(r) for r in rh.fake.received) < 2:
        assert time.monotonic() < deadline, "the sub-agent never got going"
        await asyncio.sleep(0.05)
    await rh.submit_steering(request, SteeringKind.INTERRUPT, "a person took the conversation over")
    row = await rh.wait_run(request)
    digger_calls = sum("You are Digger." in system_of(r) for r in rh.fake.received)
    assert row.status == "aborted" and row.abort_reason == "interrupted", (row.status, row.abort_reason)
    assert digger_calls <= 3, f"the sub-agent went on for {digger_calls} calls"


async def test_a_subagents_billed_steps_are_on_the_runs_row_while_it_still_works(rh: RunnerHarness) -> None:
    """A runner killed mid-delegation (OOM, a lost node) runs no shutdown code: what the row says the
    run spent is what the recovery's closing counts. The sub-agent's steps joined the row only when
    it returned, so a kill left them out — the provider billed them, the org's usage never did."""
    parent = create_agent(rh.db, model="claude-haiku-4-5", system_prompt="You are the orchestrator.")
    worker = sub_agent(rh, parent, "Counter", tool_ids=[SEARCH_CONTACTS])
    grant(rh, parent, [worker])

    def script(received: Received) -> Reply:
        if "You are Counter." in system_of(received):
            if has_tool_result(received):
                return Reply(text="done", delay_s=3, input_tokens=1, output_tokens=1)
            return tool(SEARCH_CONTACTS, {"query": "Ana"}, input_tokens=300, output_tokens=30)
        if has_tool_result(received):
            return Reply(text="Pronto.", input_tokens=10, output_tokens=5)
        return tool("agent_counter", {"task": "Find Ana"}, input_tokens=400, output_tokens=20)

    rh.fake.script(script)
    request = run_request(parent, [inbound(rh.db, parent, "Procura a Ana")])
    await rh.submit(request)
    deadline = time.monotonic() + 20
    while sum("You are Counter." in system_of(r) for r in rh.fake.received) < 2:  # its second, slow call
        assert time.monotonic() < deadline, "the sub-agent never reached its second call"
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    row = rh.run_row(request)
    assert row is not None and row.status == "running"
    assert (row.tokens_in, row.tokens_out) == (400 + 300, 20 + 30), "the sub-agent's first step is counted already"
    done = await rh.wait_run(request)
    assert (done.tokens_in, done.tokens_out) == (400 + 300 + 1 + 10, 20 + 30 + 1 + 5), "and nothing twice"
