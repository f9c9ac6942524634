"""The classification step end to end (issue 6 item 9): labels stored on the run and shown by the API.

Real broker and database; each provider's official SDK against the fake provider, which must
receive a forced tool choice (structured output as a tool-shaped answer).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session

from switchboard.contracts import RunCompleted
from switchboard.db.models import AiAgentVersion
from switchboard.db.session import tenant_transaction
from tests.integration.runner.harness import Agent, RunnerHarness, create_agent, inbound, run_request
from tests.support.api import create_org
from tests.support.fake_llm import Received, Reply, tool
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration

LABELS = {"intent": "ask_price", "urgency": "high", "category": "sales", "tone": "neutral"}
FORCED: dict[str, tuple[str, Any]] = {
    "anthropic": ("tool_choice", {"type": "tool", "name": "record_classification"}),
    "openai": ("tool_choice", {"type": "function", "function": {"name": "record_classification"}}),
    "google": (
        "toolConfig",
        {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["record_classification"]}},
    ),
}
MODELS = {"anthropic": "claude-haiku-4-5", "openai": "gpt-5-mini", "google": "gemini-2.5-flash"}


def enable(rh: RunnerHarness, agent: Agent) -> None:
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        session.execute(
            update(AiAgentVersion).where(AiAgentVersion.id == agent.version_id).values(classification_enabled=True)
        )


def is_classification(received: Received) -> bool:
    return "record_classification" in json.dumps(received.body.get("tools", []))


@pytest.mark.parametrize("provider", ["anthropic", "openai", "google"])
async def test_labels_are_stored_counted_and_shown_by_the_api(
    rh: RunnerHarness, api: httpx.AsyncClient, stack: StackEndpoints, provider: str
) -> None:
    org = create_org(stack.database_url)
    agent = create_agent(rh.db, provider=provider, model=MODELS[provider], org_id=org.org_id, contact_name="Ana Souza")
    enable(rh, agent)

    def script(received: Received) -> Reply:
        if is_classification(received):
            return tool("record_classification", LABELS, input_tokens=70, output_tokens=15)
        return Reply(text="O plano custa R$ 99.", input_tokens=100, output_tokens=20)

    rh.fake.script(script)
    before = len(rh.fake.received)
    request = run_request(agent, [inbound(rh.db, agent, "Sou a Ana Souza, quanto custa o plano?")])
    row = await rh.run(request)

    assert row.status == "completed", (row.error_code, row.summary)
    assert row.classification == LABELS
    calls = rh.fake.received[before:]
    assert [is_classification(c) for c in calls] == [True, False]  # before the agent's loop
    key, forced = FORCED[provider]
    assert calls[0].body[key] == forced
    assert "Souza" not in json.dumps(calls[0].body)  # sealed by the run's pseudonymizer
    assert "urgency high" in json.dumps(calls[1].body)  # the agent sees the labels
    # Its tokens are the run's (the cost too: priced like every call of the run).
    assert row.tokens_in == 170 and row.tokens_out == 35
    entry = next(e for e in row.tool_calls if e.get("purpose") == "classification")
    assert entry["tokens_in"] == 70 and entry["cost_micros"] > 0
    assert row.cost_micros == entry["cost_micros"] + next(
        e["cost_micros"] for e in row.tool_calls if e["kind"] == "model" and "purpose" not in e
    )
    completed = next(r for _, r in rh.outbox(agent.conversation_id) if isinstance(r, RunCompleted))
    assert completed.tokens_in == 170 and completed.cost_micro_usd == row.cost_micros

    shown = await api.get(f"/api/v1/runs/{request.run_id}", headers=org.headers())
    assert shown.status_code == 200, shown.text
    assert shown.json()["data"]["classification"] == LABELS


async def test_an_answer_off_schema_leaves_the_run_unclassified_and_answered(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db)
    enable(rh, agent)

    def script(received: Received) -> Reply:
        if is_classification(received):
            return tool("record_classification", {**LABELS, "urgency": "whenever"})
        return Reply(text="Olá!")

    rh.fake.script(script)
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Oi")]))

    assert row.status == "completed" and row.final_text == "Olá!"
    assert row.classification is None
    assert any(e["kind"] == "guard" and e["name"] == "classification_failed" for e in row.tool_calls)
    assert row.tokens_in == 200  # the failed classification was still paid for


async def test_the_demo_model_labels_deterministically(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db, provider="demo", model="demo", api_key=None)
    enable(rh, agent)
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "URGENTE!!! O boleto veio errado")]))

    assert row.status == "completed"
    assert row.classification == {
        "intent": "billing_question",
        "urgency": "urgent",
        "category": "billing",
        "tone": "angry",
    }
    assert row.tokens_in == 0 and row.cost_micros == 0


async def test_a_labeling_call_the_runs_budget_cannot_cover_is_not_made(rh: RunnerHarness) -> None:
    """A long message on a small budget: the labeling call's worst case would take the run past
    its cost budget before the loop starts, so it is skipped (and says so) — the run stays within."""
    budget = 10_000  # $0.01, the least a version may have
    agent = create_agent(rh.db, cost_budget_micros=budget, token_budget=50_000)
    enable(rh, agent)
    rh.fake.script(
        lambda received: tool("record_classification", LABELS) if is_classification(received) else Reply(text="Ok.")
    )
    before = len(rh.fake.received)
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "quero saber " * 4_000)]))
    assert not any(is_classification(c) for c in rh.fake.received[before:]), "no labeling call was made"
    assert any(e["kind"] == "guard" and e["name"] == "classification_skipped" for e in row.tool_calls)
    assert row.cost_micros <= budget and row.classification is None
