"""Classification labels in trigger filters (issue 6 item 9), end to end in the runner.

A version whose ``trigger_config.classification`` does not accept the labels ends its run
without a model loop and without a reply, and dispatches the same messages again excluding
its agent (and every agent that refused them before), in the outbox of its terminal transaction.
Real broker and database; the provider is the fake one.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from switchboard.contracts import DispatchRequested, RunCompleted, RunStatus, Topics, WakeReason
from switchboard.contracts.serde import Serde
from switchboard.db.models import AiAgentVersion, OutboxEvent
from switchboard.db.session import tenant_transaction
from tests.integration.runner.harness import Agent, RunnerHarness, create_agent, inbound, run_request
from tests.support.agents import create_agent as api_create_agent
from tests.support.agents import make_channel, version_body
from tests.support.api import create_org
from tests.support.fake_llm import Received, Reply, tool
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration

LABELS = {"intent": "ask_price", "urgency": "high", "category": "sales", "tone": "neutral"}


def configure(rh: RunnerHarness, agent: Agent, label_filter: dict[str, Any]) -> None:
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        version = session.get(AiAgentVersion, agent.version_id)
        assert version is not None
        session.execute(
            update(AiAgentVersion)
            .where(AiAgentVersion.id == agent.version_id)
            .values(
                classification_enabled=True, trigger_config={**version.trigger_config, "classification": label_filter}
            )
        )


def redispatched(rh: RunnerHarness, agent: Agent) -> list[DispatchRequested]:
    serde = Serde.from_settings(rh.kafka)
    with Session(rh.db) as session:
        payloads = session.scalars(
            select(OutboxEvent.payload)
            .where(
                OutboxEvent.topic == Topics.DISPATCH_REQUESTED.name,
                OutboxEvent.key == str(agent.conversation_id).encode(),
            )
            .order_by(OutboxEvent.id)
        ).all()
    return [serde.decode(Topics.DISPATCH_REQUESTED, bytes(p)) for p in payloads]


def is_classification(received: Received) -> bool:
    return "record_classification" in json.dumps(received.body.get("tools", []))


def script(received: Received) -> Reply:
    if is_classification(received):
        return tool("record_classification", LABELS, input_tokens=70, output_tokens=15)
    return Reply(text="O plano custa R$ 99.", input_tokens=100, output_tokens=20)


async def test_an_unmet_filter_ends_the_run_unanswered_and_dispatches_again_without_the_agent(
    rh: RunnerHarness,
) -> None:
    agent = create_agent(rh.db)
    configure(rh, agent, {"category": ["billing", "support"]})
    rh.fake.script(script)
    before = len(rh.fake.received)
    message = inbound(rh.db, agent, "Quanto custa o plano?")
    row = await rh.run(run_request(agent, [message]))

    assert (row.status, row.abort_reason, row.vitality) == ("aborted", "classification_mismatch", "completed"), (
        row.summary
    )
    assert row.error_family is None  # handed on by design, not a failure
    assert row.final_text is None and row.would_send_to is None
    assert row.classification == LABELS  # the labels are kept on the run
    assert [is_classification(c) for c in rh.fake.received[before:]] == [True]  # no model loop
    assert (row.tokens_in, row.tokens_out) == (70, 15) and row.cost_micros > 0  # the classification is paid
    assert any(e.get("purpose") == "classification" for e in row.tool_calls)
    completed = next(r for _, r in rh.outbox(agent.conversation_id) if isinstance(r, RunCompleted))
    assert completed.status is RunStatus.ABORTED and completed.tokens_in == 70
    (again,) = redispatched(rh, agent)
    assert again.excluded_agent_ids == (agent.agent_id,)
    assert again.message is not None and again.message.message_id == message.message_id
    assert again.wake_reason is WakeReason.USER_MESSAGE and again.target_agent_id is None
    assert again.wake_context.run_id == row.id


async def test_a_met_filter_answers_as_usual(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db)
    configure(rh, agent, {"category": ["sales"], "urgency": ["high", "urgent"], "intent": []})
    rh.fake.script(script)
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "Quanto custa o plano?")]))

    assert row.status == "completed" and row.final_text == "O plano custa R$ 99."
    assert redispatched(rh, agent) == []


async def test_every_agent_that_refused_the_messages_stays_excluded(rh: RunnerHarness) -> None:
    first = create_agent(rh.db)
    other = create_agent(rh.db, org_id=first.org_id, provider="demo", model="demo", api_key=None)  # rule labels
    second = dataclasses.replace(
        first, agent_id=other.agent_id, version_id=other.version_id, credential_id=other.credential_id
    )
    configure(rh, first, {"tone": ["angry"]})
    configure(rh, second, {"urgency": ["low"]})
    rh.fake.script(script)
    message = inbound(rh.db, first, "Quanto custa o plano?")
    await rh.run(run_request(first, [message]))
    row = await rh.run(run_request(second, [message]))

    assert row.abort_reason == "classification_mismatch"
    latest = redispatched(rh, first)[-1]
    assert set(latest.excluded_agent_ids) == {first.agent_id, other.agent_id}


async def test_agents_api_stores_validates_and_publishes_the_filter(
    rh: RunnerHarness, api: httpx.AsyncClient, stack: StackEndpoints
) -> None:
    org = create_org(stack.database_url)
    channel = make_channel(org)
    wanted = {"intent": ["ask_price"], "urgency": [], "category": ["sales", "billing"], "tone": []}
    created = await api_create_agent(
        api, org, channel, classification_enabled=True, trigger_config={"classification": wanted}
    )
    agent_id, version = created["agent"]["id"], created["version"]
    assert version["trigger_config"]["classification"] == wanted
    # Published: the dispatcher's snapshot has no classification filter (the runner checks it).
    published = await api.post(
        f"/api/v1/agents/{agent_id}:publish", json={"version_id": version["id"]}, headers=org.headers()
    )
    assert published.status_code == 200, published.text

    for body in (
        version_body(channel, classification_enabled=True, trigger_config={"classification": {"category": ["refund"]}}),
        version_body(
            channel, classification_enabled=True, trigger_config={"classification": {"intent": ["Ask Price"]}}
        ),
        version_body(channel, classification_enabled=True, trigger_config={"classification": {"mood": ["happy"]}}),
        version_body(channel, trigger_config={"classification": {"category": ["sales"]}}),  # never classified
    ):
        refused = await api.post(f"/api/v1/agents/{agent_id}/versions", json=body, headers=org.headers())
        assert refused.status_code == 422, (body, refused.text)

    plain = await api_create_agent(api, org, channel)
    assert "classification" not in plain["version"]["trigger_config"]  # additive: absent reads as before
