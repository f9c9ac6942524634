"""``POST /api/v1/conversations/{id}:wake`` (issue 6 item 3): refusals with stable codes, and end to end with
a real ``switchboard dispatcher`` process and the runner — the wake reason and its ids are recorded on the
run and shown to the model in the Wake context layer."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from switchboard.contracts import Topics, TriggerConfig
from switchboard.db.enums import Role
from switchboard.db.models import AiAgentRun, AuditLogEntry, Conversation
from switchboard.db.session import tenant_transaction
from switchboard.kafka.producer import RecordProducer
from switchboard.settings import KafkaSettings
from tests.integration.dispatcher.harness import WorkerProcess, agent_snapshot, publish_record
from tests.integration.memory.conftest import dispatches
from tests.integration.runner.harness import TERMINAL, Agent, RunnerHarness, create_agent
from tests.support.api import OrgHandle, create_org
from tests.support.fake_llm import Reply
from tests.support.stack import StackEndpoints

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def org(stack: StackEndpoints) -> OrgHandle:
    return create_org(stack.database_url)


@pytest.fixture
def agent(rh: RunnerHarness, org: OrgHandle) -> Agent:
    return create_agent(rh.db, org_id=org.org_id)


def wake_url(conversation_id: uuid.UUID) -> str:
    return f"/api/v1/conversations/{conversation_id}:wake"


async def test_refusals_have_stable_codes_and_queue_nothing(
    rh: RunnerHarness, api: httpx.AsyncClient, org: OrgHandle, agent: Agent, stack: StackEndpoints
) -> None:
    headers = org.headers(Role.MANAGER)
    url = wake_url(agent.conversation_id)
    cases = [
        ({"reason": "userMessage"}, 422, "wake_reason_user_message"),
        ({"reason": "followUp", "context": {}}, 422, "wake_context_missing"),
        ({"reason": "childCompleted", "context": {"run_id": str(uuid.uuid4())}}, 422, "wake_context_unknown"),
        ({"reason": "recovery", "context": {"run_id": str(uuid.uuid4())}}, 422, "wake_context_unknown"),
        # The assigner must be a member of this org: any user id was taken and shown to the agent.
        (
            {"reason": "assignment", "context": {"assigned_by_user_id": str(uuid.uuid4())}},
            422,
            "wake_context_unknown",
        ),
        ({"reason": "sleepy"}, 422, "validation_error"),
    ]
    for body, status, code in cases:
        response = await api.post(url, json=body, headers=headers)
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), body
    other = create_org(stack.database_url)
    response = await api.post(url, json={"reason": "assignment"}, headers=other.headers(Role.MANAGER))
    assert response.status_code == 404, "another org's conversation does not exist for the caller"
    with Session(rh.db) as session, tenant_transaction(session, org.org_id):
        session.execute(update(Conversation).where(Conversation.id == agent.conversation_id).values(status="handoff"))
    response = await api.post(url, json={"reason": "assignment"}, headers=headers)
    assert (response.status_code, response.json()["error"]["code"]) == (409, "conversation_not_dispatchable")
    assert dispatches(rh, agent.conversation_id) == []


async def test_assignment_defaults_to_the_caller_and_is_audited(
    rh: RunnerHarness, api: httpx.AsyncClient, org: OrgHandle, agent: Agent
) -> None:
    response = await api.post(wake_url(agent.conversation_id), json={"reason": "assignment"}, headers=org.headers())
    assert response.status_code == 202, response.text
    data = response.json()["data"]
    [(_, record)] = dispatches(rh, agent.conversation_id)
    assert str(record.event_id) == data["dispatch_id"] and record.message is None
    assert record.wake_reason.value == "assignment" and record.wake_context.assigned_by_user_id == org.admin_user_id
    with Session(rh.db) as session, tenant_transaction(session, org.org_id):
        actions = session.scalars(
            select(AuditLogEntry.action).where(AuditLogEntry.target_id == str(agent.conversation_id))
        ).all()
    assert actions == ["conversation.woken"]


@pytest.fixture
async def dispatcher(
    module_kafka: KafkaSettings, stack: StackEndpoints, tmp_path: Path
) -> AsyncIterator[WorkerProcess]:
    worker = WorkerProcess(module_kafka, stack.database_url, tmp_path).start()
    try:
        await worker.wait_ready()
        yield worker
    finally:
        worker.stop()


async def _run_of(rh: RunnerHarness, agent: Agent, timeout_s: float = 40.0) -> AiAgentRun:
    deadline = time.monotonic() + timeout_s

    def poll() -> AiAgentRun | None:
        with Session(rh.db, expire_on_commit=False) as session, tenant_transaction(session, agent.org_id):
            return session.scalar(select(AiAgentRun).where(AiAgentRun.conversation_id == agent.conversation_id))

    while True:
        row = await asyncio.to_thread(poll)
        if row is not None and row.status in TERMINAL:
            return row
        assert time.monotonic() < deadline, f"no finished run for the wake: {row and row.status}"
        await asyncio.sleep(0.2)


async def test_wake_goes_through_the_dispatcher_to_a_run_that_records_and_shows_the_reason(
    rh: RunnerHarness,
    api: httpx.AsyncClient,
    org: OrgHandle,
    agent: Agent,
    module_kafka: KafkaSettings,
    dispatcher: WorkerProcess,
) -> None:
    rh.fake.script([Reply(text="Pipeline step done.")])
    seen_before = len(rh.fake.received)
    # The agent listens to pipeline steps only: the dispatcher selects it by the wake's event type.
    snapshot = agent_snapshot(
        org.org_id, agent.channel_session_id, trigger=TriggerConfig(event_types=("pipeline_step",))
    ).model_copy(update={"agent_id": agent.agent_id, "version_id": agent.version_id})
    pipeline_run_id = uuid.uuid4()
    response = await api.post(
        wake_url(agent.conversation_id),
        json={"reason": "pipelineStep", "context": {"pipeline_run_id": str(pipeline_run_id)}},
        headers=org.headers(Role.MANAGER),
    )
    assert response.status_code == 202, response.text
    [(payload, _)] = dispatches(rh, agent.conversation_id)
    async with RecordProducer(module_kafka, service="test", linger_ms=1) as producer:
        await producer.send(Topics.PUBLISHED, publish_record(org.org_id, snapshot))
        # What the outbox relay does with the row (no relay in tests: the outbox table is shared).
        await producer.send_raw(Topics.DISPATCH_REQUESTED, key=str(agent.conversation_id).encode(), value=payload)
    run = await _run_of(rh, agent)
    assert run.status == "completed" and run.final_text == "Pipeline step done."
    assert run.wake_reason == "pipelineStep"
    assert run.wake_context == {"pipeline_run_id": str(pipeline_run_id)}
    assert run.prompt is not None
    wake_layer = {layer["label"]: layer["text"] for layer in run.prompt["layers"]}["Wake context"]
    assert wake_layer == f"Wake reason: pipelineStep. Context ids: pipeline_run_id={pipeline_run_id}."
    [request] = rh.fake.received[seen_before:]
    assert f"pipeline_run_id={pipeline_run_id}" in str(request.body["system"])
