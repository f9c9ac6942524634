"""``GET /api/v1/runs/{id}/events`` with a ``Last-Event-ID`` it never sent (5000 digits, which
``int()`` refuses, or ``"²"``, which ``str.isdigit`` accepts): the stream replays from the start,
as without the header, instead of answering 500."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import httpx
import pytest

from switchboard.contracts import RunEvent, RunEventType, Topics
from switchboard.db.models.channels import Conversation
from switchboard.db.models.runs import AiAgentRun
from switchboard.kafka.producer import RecordProducer
from switchboard.settings import KafkaSettings
from tests.support.agents import create_agent, make_channel, tenant_session
from tests.support.api import OrgHandle

pytestmark = pytest.mark.integration


def _seqs(body: str) -> list[int]:
    """The ``seq`` of each event in an SSE body (the synthesized ``done`` has none)."""
    seqs = []
    for block in body.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        if "data" in fields and "seq" in json.loads(fields["data"]):
            seqs.append(json.loads(fields["data"])["seq"])
    return seqs


async def _finished_run_with_events(client: httpx.AsyncClient, org: OrgHandle, kafka: KafkaSettings) -> uuid.UUID:
    channel = make_channel(org)
    agent = await create_agent(client, org, channel)
    agent_id, version_id = uuid.UUID(agent["agent"]["id"]), uuid.UUID(agent["version"]["id"])
    with tenant_session(org) as session:
        conversation = Conversation(org_id=org.org_id, channel_session_id=channel, chat_id="5511900001111@c.us")
        session.add(conversation)
        session.flush()
        run = AiAgentRun(
            org_id=org.org_id,
            agent_id=agent_id,
            agent_version_id=version_id,
            conversation_id=conversation.id,
            channel_session_id=channel,
            status="completed",
            created_at=datetime.now(UTC),
        )
        session.add(run)
        session.flush()
        conversation_id, run_id = conversation.id, run.id
    async with RecordProducer(kafka, service="test") as producer:
        for seq, kind, text in ((1, RunEventType.TEXT, "Olá"), (2, RunEventType.DONE, None)):
            event = RunEvent(
                org_id=org.org_id,
                conversation_id=conversation_id,
                run_id=run_id,
                agent_id=agent_id,
                seq=seq,
                type=kind,
                text=text,
            )
            await producer.send(Topics.RUN_EVENTS, event)
    return run_id


# Sent as Latin-1 bytes: how the server decodes header values (so b"\xb2" arrives as "²").
@pytest.mark.parametrize("last_event_id", ["9" * 5000, "²", "1²", " 1", "-1"])
async def test_an_unusable_last_event_id_replays_from_the_start(
    client: httpx.AsyncClient, org: OrgHandle, topics: KafkaSettings, last_event_id: str
) -> None:
    run_id = await _finished_run_with_events(client, org, topics)
    path = f"/api/v1/runs/{run_id}/events"
    headers = {k.encode(): v.encode() for k, v in org.headers().items()}
    resumed = await client.get(path, headers={**headers, b"Last-Event-ID": last_event_id.encode("latin-1")})
    assert resumed.status_code == 200, resumed.text
    assert _seqs(resumed.text) == [1, 2]
    # A real id still resumes after it.
    after_first = await client.get(path, headers={**org.headers(), "Last-Event-ID": "1"})
    assert _seqs(after_first.text) == [2]
