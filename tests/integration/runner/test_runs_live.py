"""The dry-run test endpoint and the SSE stream of a run's events, through the API app in-process.

The dispatcher is emulated (it is tested on its own): the test reads the
``dispatch_requested`` the endpoint put in the outbox and hands the runner the
matching ``run_requested``, as the dispatcher does for a dry run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import Session

from services.api.app import create_app
from services.api.settings import ApiSettings
from services.dispatcher.agents import AgentIndex
from services.dispatcher.policy import apply
from services.dispatcher.sink import DecisionSink
from switchboard.contracts import DispatchRequested, RunRequested, Serde, Topics
from switchboard.db.models import OutboxEvent
from switchboard.kafka.consumer import Inbound
from switchboard.settings import DatabaseSettings, KafkaSettings
from switchboard.tool_catalog import SEARCH_CONTACTS, SEND_WHATSAPP_MESSAGE
from tests.integration.runner.harness import RunnerHarness, create_agent, inbound, run_request
from tests.support.api import OrgHandle, create_org
from tests.support.fake_llm import Reply, ServedApp, tool
from tests.support.stack import StackEndpoints
from tests.unit.dispatcher.builders import context

pytestmark = pytest.mark.integration


@contextlib.asynccontextmanager
async def emulated_dispatcher(
    rh: RunnerHarness, org_id: uuid.UUID, *, over_budget: bool = False
) -> AsyncIterator[None]:
    """Hands the runner the dry run each test dispatch asks for; ``over_budget``: decides about it
    with the dispatcher's own policy for an org over its monthly cap, and stores that decision
    with its own sink, as the real worker does."""
    serde = Serde.from_settings(rh.kafka)
    handled: set[int] = set()
    engine = create_async_engine(rh.db.url.render_as_string(hide_password=False), pool_size=1)

    async def loop() -> None:
        while True:
            with Session(rh.db) as session:
                rows = session.execute(
                    select(OutboxEvent.id, OutboxEvent.payload).where(
                        OutboxEvent.topic == Topics.DISPATCH_REQUESTED.name, OutboxEvent.id.not_in(handled or {0})
                    )
                ).all()
            for row in rows:
                handled.add(row.id)
                record = serde.decode(Topics.DISPATCH_REQUESTED, row.payload)
                if record.org_id != org_id:
                    continue
                assert isinstance(record, DispatchRequested) and record.dry_run and record.message
                assert record.target_agent_id and record.target_version_id
                if over_budget:
                    ctx = context(AgentIndex(), now=datetime.now(UTC), over_budget={org_id: "cost"})
                    decided = apply(None, record, ctx)
                    batch = [Inbound(Topics.DISPATCH_DECISIONS, 0, n, None, d) for n, d in enumerate(decided.decisions)]
                    await DecisionSink(engine).write(batch)
                    continue
                await rh.submit(
                    RunRequested(
                        org_id=record.org_id,
                        conversation_id=record.conversation_id,
                        contact_id=record.contact_id,
                        channel_session_id=record.channel_session_id,
                        run_id=uuid.uuid4(),
                        agent_id=record.target_agent_id,
                        version_id=record.target_version_id,
                        wake_reason=record.wake_reason,
                        wake_context=record.wake_context,
                        messages=(record.message,),
                        dispatch_ids=(record.event_id,),
                        dry_run=True,
                    )
                )
            await asyncio.sleep(0.2)

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await engine.dispose()


def parse_sse(body: str) -> list[tuple[str, dict[str, object]]]:
    events = []
    for block in body.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        if "event" in fields:
            events.append((fields["event"], json.loads(fields["data"])))
    return events


async def test_dry_run_returns_the_trace_sends_nothing_and_streams_its_events(
    rh: RunnerHarness, api: httpx.AsyncClient, stack: StackEndpoints
) -> None:
    org: OrgHandle = create_org(stack.database_url)
    agent = create_agent(
        rh.db, org_id=org.org_id, provider="anthropic", model="claude-haiku-4-5", tool_ids=[SEND_WHATSAPP_MESSAGE]
    )
    rh.fake.script([tool(SEND_WHATSAPP_MESSAGE, {"text": "oferta"}), Reply(text="Custa R$ 10.", output_tokens=9)])
    async with emulated_dispatcher(rh, org.org_id):
        response = await api.post(
            f"/api/v1/agents/{agent.agent_id}/versions/{agent.version_id}:test",
            json={
                "sample_message": "Quanto custa o produto X?",
                "sample_contact": {"name": "Cliente Teste", "phone": "+55 11 91234-5678"},
            },
            headers=org.headers(),
        )
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert data["status"] == "completed" and data["final_text"] == "Custa R$ 10."
    assert data["run"]["is_dry_run"] is True
    assert data["would_send_to"]["chat_id"].startswith("switchboard-test-")
    assert [s["tool_name"] for s in data["tool_calls"] if s["kind"] == "tool"] == [SEND_WHATSAPP_MESSAGE]
    assert data["tokens_out"] > 0 and data["cost_micro_usd"] > 0 and data["latency_ms"] is not None
    outbound = rh.scalar(org.org_id, "SELECT count(*) FROM messages WHERE direction = 'outbound'")
    assert outbound == 0
    phone = rh.scalar(org.org_id, "SELECT phone_number FROM contacts WHERE external_id LIKE 'switchboard-test-%'")
    assert phone == "+5511912345678", "the sample contact's phone is on the test contact, in E.164"
    # The test's handle (what a 202 would give to find the run later), and who ran it: audited.
    assert data["conversation_id"] == data["run"]["conversation_id"]
    sample = rh.scalar(org.org_id, "SELECT body FROM messages WHERE id = :m", m=data["message_id"])
    assert sample == "Quanto custa o produto X?"
    audited = rh.scalar(
        org.org_id,
        "SELECT json_build_object('actor', actor_user_id, 'target', target_id, 'details', details)"
        " FROM audit_log WHERE action = 'ai_agent_version.tested'",
    )
    assert audited["actor"] == str(org.admin_user_id) and audited["target"] == str(agent.version_id)
    assert audited["details"] == {
        "agent_id": str(agent.agent_id),
        "conversation_id": data["conversation_id"],
        "message_id": data["message_id"],
    }
    assert "Quanto custa" not in json.dumps(audited), "never the sample's text"

    stream = await api.get(f"/api/v1/runs/{data['run_id']}/events", headers=org.headers())
    assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(stream.text)
    kinds = [kind for kind, _ in events]
    assert kinds[-1] == "done" and {"tool_call", "tool_result", "usage", "text"} <= set(kinds)
    seqs = [payload["seq"] for _, payload in events]
    assert seqs == sorted(seqs)
    # Resuming after the first events replays only what came later.
    resumed = await api.get(
        f"/api/v1/runs/{data['run_id']}/events", headers={**org.headers(), "Last-Event-ID": str(seqs[1])}
    )
    assert [p["seq"] for _, p in parse_sse(resumed.text)] == seqs[2:]


async def test_events_of_another_orgs_run_are_not_found(
    rh: RunnerHarness, api: httpx.AsyncClient, stack: StackEndpoints
) -> None:
    org = create_org(stack.database_url)
    response = await api.get(f"/api/v1/runs/{uuid.uuid4()}/events", headers=org.headers())
    assert response.status_code == 404


async def test_the_trace_is_typed_model_tool_and_guard_entries(
    rh: RunnerHarness, api: httpx.AsyncClient, stack: StackEndpoints
) -> None:
    org = create_org(stack.database_url)
    agent = create_agent(
        rh.db,
        org_id=org.org_id,
        provider="anthropic",
        model="claude-haiku-4-5",
        tool_ids=[SEARCH_CONTACTS],
        max_steps=2,
    )
    rh.fake.script(lambda r: tool(SEARCH_CONTACTS, {"query": f"q{len(r.body['messages'])}"}, input_tokens=80))
    request = run_request(agent, [inbound(rh.db, agent, "Procure clientes")])
    assert (await rh.run(request)).abort_reason == "max_steps_reached"

    response = await api.get(f"/api/v1/runs/{request.run_id}", headers=org.headers())
    assert response.status_code == 200
    trace = response.json()["data"]["trace"]
    assert [e["kind"] for e in trace] == ["model", "tool", "model", "tool", "guard"]
    models = [e for e in trace if e["kind"] == "model"]
    tools = [e for e in trace if e["kind"] == "tool"]
    (guard,) = [e for e in trace if e["kind"] == "guard"]
    # Only tool entries name a tool; model and guard entries carry their own details instead.
    assert all(e["tool_name"] is None and e["guard"] is None for e in models)
    assert all(e["model"]["tokens_in"] == 80 and e["model"]["tool_calls"] == [SEARCH_CONTACTS] for e in models)
    assert all(e["tool_name"] == SEARCH_CONTACTS and e["is_error"] is False and e["model"] is None for e in tools)
    assert guard["tool_name"] is None and guard["guard"]["name"] == "budget_stop"
    assert "max_steps_reached" in guard["guard"]["detail"]
    # Documented: the OpenAPI schema describes the kinds and each kind's details.
    schemas = (await api.get("/openapi.json")).json()["components"]["schemas"]
    assert schemas["TraceKind"]["enum"] == ["model", "tool", "guard"]
    assert {"kind", "tool_name", "model", "guard", "is_error"} <= set(schemas["RunStep"]["properties"])


async def test_a_test_the_dispatcher_refuses_is_answered_at_once_with_its_decision(
    rh: RunnerHarness, api: httpx.AsyncClient, stack: StackEndpoints
) -> None:
    """An org over its monthly cap: the dispatcher records ``budget_exceeded`` for the test; the
    endpoint says so (409 ``dry_run_refused``) instead of waiting out its deadline for a run."""
    org = create_org(stack.database_url)
    agent = create_agent(rh.db, org_id=org.org_id, provider="anthropic", model="claude-haiku-4-5")
    started = time.monotonic()
    async with emulated_dispatcher(rh, org.org_id, over_budget=True):
        refused = await api.post(
            f"/api/v1/agents/{agent.agent_id}/versions/{agent.version_id}:test",
            json={"sample_message": "Oi"},
            headers=org.headers(),
        )
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "dry_run_refused" and error["details"]["outcome"] == "budget_exceeded"
    assert "monthly cost cap" in error["message"]
    assert time.monotonic() - started < 20, "answered when the decision was recorded, not at the deadline"


async def test_a_sample_phone_that_is_not_e164_is_refused(
    rh: RunnerHarness, api: httpx.AsyncClient, stack: StackEndpoints
) -> None:
    org = create_org(stack.database_url)
    agent = create_agent(rh.db, org_id=org.org_id, provider="anthropic", model="claude-haiku-4-5")
    refused = await api.post(
        f"/api/v1/agents/{agent.agent_id}/versions/{agent.version_id}:test",
        json={"sample_message": "Oi", "sample_contact": {"phone": "call me maybe"}},
        headers=org.headers(),
    )
    assert refused.status_code == 422 and "E.164" in refused.text


async def test_waits_answer_when_the_api_starts_stopping(
    rh: RunnerHarness, stack: StackEndpoints, module_kafka: KafkaSettings
) -> None:
    """A rollout stops an API replica while a dry run is still thinking (the test waits up to 60 s
    for it) and a browser follows its live events: both answer within moments of the stop — the
    test with ``202`` and what is known, the stream by ending without ``done`` so the EventSource
    reconnects elsewhere — instead of being cut at the graceful timeout (20 s) with nothing."""
    org = create_org(stack.database_url)
    agent = create_agent(rh.db, org_id=org.org_id, provider="anthropic", model="claude-haiku-4-5")
    rh.fake.script([Reply(text="pensando...", delay_s=30)])
    settings = ApiSettings(
        database=DatabaseSettings(url=stack.database_url, owner_url=stack.database_owner_url),
        kafka=module_kafka,
        outbox_relay=False,
    )
    app = create_app(settings)
    served = await ServedApp(app).start()
    try:
        async with emulated_dispatcher(rh, org.org_id), httpx.AsyncClient(base_url=served.url, timeout=90) as http:
            testing = asyncio.create_task(
                http.post(
                    f"/api/v1/agents/{agent.agent_id}/versions/{agent.version_id}:test",
                    json={"sample_message": "Oi"},
                    headers=org.headers(),
                )
            )
            run_id = None
            for _ in range(100):
                run_id = rh.scalar(org.org_id, "SELECT id FROM ai_agent_runs WHERE status = 'running' LIMIT 1")
                if run_id is not None:
                    break
                await asyncio.sleep(0.2)
            assert run_id is not None, "the dry run is running"
            following = asyncio.create_task(http.get(f"/api/v1/runs/{run_id}/events", headers=org.headers()))
            await asyncio.sleep(1.0)
            assert not testing.done() and not following.done()

            stopping_at = time.monotonic()
            app.state.draining.set()
            tested, followed = await asyncio.wait_for(asyncio.gather(testing, following), timeout=10)
            waited = time.monotonic() - stopping_at
    finally:
        await served.stop()
    assert waited < 5, waited
    assert tested.status_code == 202, tested.text
    assert tested.json()["data"]["run_id"] == str(run_id), "the handle to find the run later"
    assert followed.status_code == 200
    assert "done" not in [kind for kind, _ in parse_sse(followed.text)], "the run is not over"
