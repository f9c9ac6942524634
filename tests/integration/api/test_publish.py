"""Publish, pause and archive [004 §4.5]: the atomic switch, its `published` outbox record
(decoded with the real contract), concurrency, and the preconditions that make it a 409."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update

from switchboard.contracts import AgentPublished, Serde
from switchboard.contracts.records import AgentVersionSnapshot
from switchboard.contracts.topics import Topics
from switchboard.db.enums import Role
from switchboard.db.models.agents import AiAgentVersion, AiProviderCredential
from switchboard.db.models.outbox import OutboxEvent
from switchboard.settings import KafkaSettings
from tests.support.agents import (
    audit_actions,
    create_agent,
    make_channel,
    make_credential,
    save_draft,
    tenant_session,
)
from tests.support.api import OrgHandle

pytestmark = pytest.mark.integration


@pytest.fixture
def serde(kafka_settings: KafkaSettings) -> Serde:
    """The same contract the app encodes with (same settings, same registry)."""
    return Serde.from_settings(kafka_settings)


def published_records(org: OrgHandle, serde: Serde, agent_id: str) -> list[AgentPublished]:
    """Every `published` outbox row of one agent (the topic key), oldest first, decoded."""
    with tenant_session(org) as session:
        rows = list(
            session.scalars(
                select(OutboxEvent)
                .where(OutboxEvent.topic == Topics.PUBLISHED.name, OutboxEvent.key == agent_id.encode())
                .order_by(OutboxEvent.id)
            )
        )
    return [serde.decode(Topics.PUBLISHED, row.payload) for row in rows]


def published_count(org: OrgHandle, agent_id: str) -> int:
    with tenant_session(org) as session:
        return int(
            session.execute(
                select(func.count())
                .select_from(AiAgentVersion)
                .where(AiAgentVersion.agent_id == uuid.UUID(agent_id), AiAgentVersion.status == "published")
            ).scalar_one()
        )


def expected_snapshot(agent: dict[str, Any], version: dict[str, Any]) -> AgentVersionSnapshot:
    """What the record must carry, built from the API's own views of the agent and version."""
    return AgentVersionSnapshot(
        version_id=version["id"],
        agent_id=agent["id"],
        version_number=version["version_number"],
        agent_name=agent["name"],
        priority=agent["priority"],
        agent_created_at=agent["created_at"],
        system_prompt=version["system_prompt"],
        provider=version["provider"],
        model=version["model"],
        credential_id=version["credential_id"],
        tool_ids=version["tool_ids"],
        trigger=version["trigger_config"],
        channel_session_id=version["channel_session_id"],
        max_steps=version["max_steps"],
        token_budget=version["token_budget"],
        cost_budget_cents=version["cost_budget_cents"],
        history_message_window=version["history_message_window"],
        history_token_window=version["history_token_window"],
        handoff_keywords=version["handoff_keywords"],
        handoff_tool_enabled=version["handoff_tool_enabled"],
        followup=version["followup"],
        concurrency_policy=version["concurrency_policy"],
        status=version["status"],
        created_at=version["created_at"],
        published_at=version["published_at"],
    )


async def _get(client: httpx.AsyncClient, org: OrgHandle, path: str) -> dict[str, Any]:
    response = await client.get(path, headers=org.headers(Role.MANAGER))
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


async def _publish(client: httpx.AsyncClient, org: OrgHandle, agent_id: str, version_id: str) -> httpx.Response:
    return await client.post(
        f"/api/v1/agents/{agent_id}:publish", json={"version_id": version_id}, headers=org.headers()
    )


async def test_publish_switches_atomically_and_emits_the_full_snapshot(
    client: httpx.AsyncClient, org: OrgHandle, serde: Serde
) -> None:
    channel = make_channel(org)
    credential = make_credential(org)
    created = await create_agent(
        client,
        org,
        channel,
        credential_id=str(credential),
        trigger_config={
            "keyword_regex": "pre(ç|c)o",
            "business_hours": {
                "time_zone": "America/Sao_Paulo",
                "windows": [{"weekday": "friday", "start_minute": 480, "end_minute": 1080}],
            },
        },
        followup={"callback_enabled": False, "flow_pointer_ids": ["flow-1"]},
        concurrency_policy="steer",
    )
    agent_id, v1 = created["agent"]["id"], created["version"]
    v2 = await save_draft(client, org, agent_id, channel, system_prompt="Versão 2")

    first = await _publish(client, org, agent_id, v1["id"])
    assert first.status_code == 200, first.text
    assert first.json()["data"]["agent"]["published_version_id"] == v1["id"]
    assert first.json()["data"]["agent"]["status"] == "published"
    assert first.json()["data"]["version"]["status"] == "published"
    records = published_records(org, serde, agent_id)
    assert len(records) == 1
    agent = await _get(client, org, f"/api/v1/agents/{agent_id}")
    v1_now = await _get(client, org, f"/api/v1/agents/{agent_id}/versions/{v1['id']}")
    record = records[0]
    assert record.change == "published" and record.previous_version_id is None
    assert record.org_id == org.org_id and str(record.agent_id) == agent_id
    assert record.changed_by_user_id == org.admin_user_id
    assert record.version == expected_snapshot(agent, v1_now)
    assert record.version is not None and record.version.trigger.business_hours is not None

    second = await _publish(client, org, agent_id, v2["id"])
    assert second.status_code == 200, second.text
    agent = await _get(client, org, f"/api/v1/agents/{agent_id}")
    v1_after = await _get(client, org, f"/api/v1/agents/{agent_id}/versions/{v1['id']}")
    v2_after = await _get(client, org, f"/api/v1/agents/{agent_id}/versions/{v2['id']}")
    assert agent["published_version_id"] == v2["id"]
    assert v1_after["status"] == "superseded" and v1_after["superseded_at"] is not None
    assert v2_after["status"] == "published" and v2_after["published_at"] == v1_after["superseded_at"]
    assert published_count(org, agent_id) == 1
    records = published_records(org, serde, agent_id)
    assert len(records) == 2
    assert str(records[1].previous_version_id) == v1["id"]
    assert records[1].version == expected_snapshot(agent, v2_after)
    assert audit_actions(org, agent_id).count("ai_agent.published") == 2


async def test_only_drafts_change_and_published_versions_do_not_republish(
    client: httpx.AsyncClient, org: OrgHandle, serde: Serde
) -> None:
    channel = make_channel(org)
    created = await create_agent(client, org, channel)
    agent_id, v1 = created["agent"]["id"], created["version"]
    assert (await _publish(client, org, agent_id, v1["id"])).status_code == 200

    patch = await client.patch(
        f"/api/v1/agents/{agent_id}/versions/{v1['id']}", json={"max_steps": 3}, headers=org.headers()
    )
    assert patch.status_code == 409 and patch.json()["error"]["code"] == "conflict"
    again = await _publish(client, org, agent_id, v1["id"])
    assert again.status_code == 409 and again.json()["error"]["details"]["reason"] == "version_not_publishable"
    unchanged = await _get(client, org, f"/api/v1/agents/{agent_id}/versions/{v1['id']}")
    assert unchanged["max_steps"] == v1["max_steps"] and unchanged["status"] == "published"

    # A superseded version is immutable too, and can be published again (rollback).
    v2 = await save_draft(client, org, agent_id, channel)
    assert (await _publish(client, org, agent_id, v2["id"])).status_code == 200
    superseded = await client.patch(
        f"/api/v1/agents/{agent_id}/versions/{v1['id']}", json={"max_steps": 3}, headers=org.headers()
    )
    assert superseded.status_code == 409
    rollback = await _publish(client, org, agent_id, v1["id"])
    assert rollback.status_code == 200
    assert (await _get(client, org, f"/api/v1/agents/{agent_id}"))["published_version_id"] == v1["id"]
    assert (await _get(client, org, f"/api/v1/agents/{agent_id}/versions/{v2['id']}"))["status"] == "superseded"
    assert published_count(org, agent_id) == 1
    assert len(published_records(org, serde, agent_id)) == 3  # one per successful publish, none for the 409

    unknown = await _publish(client, org, agent_id, str(uuid.uuid4()))
    assert unknown.status_code == 404


@pytest.mark.parametrize(
    "reason", ["channel_session_required", "channel_session_not_working", "credential_inactive", "unknown_tools"]
)
async def test_publish_preconditions_are_409_and_change_nothing(
    client: httpx.AsyncClient, org: OrgHandle, serde: Serde, reason: str
) -> None:
    working = make_channel(org)
    credential = make_credential(org)
    if reason == "channel_session_required":
        created = await create_agent(client, org, None)
    elif reason == "channel_session_not_working":
        created = await create_agent(client, org, make_channel(org, status="scan_qr"))
    elif reason == "credential_inactive":
        created = await create_agent(client, org, working, credential_id=str(credential))
        with tenant_session(org) as session:
            session.execute(
                update(AiProviderCredential).where(AiProviderCredential.id == credential).values(is_active=False)
            )
    else:  # a tool removed from the catalog after the draft was saved
        created = await create_agent(client, org, working)
        with tenant_session(org) as session:
            session.execute(
                update(AiAgentVersion)
                .where(AiAgentVersion.id == uuid.UUID(created["version"]["id"]))
                .values(tool_ids=["crm_search_contacts", "crm_retired_tool"])
            )
    agent_id, version_id = created["agent"]["id"], created["version"]["id"]
    response = await _publish(client, org, agent_id, version_id)
    assert response.status_code == 409, response.text
    assert response.json()["error"]["details"]["reason"] == reason
    assert (await _get(client, org, f"/api/v1/agents/{agent_id}"))["published_version_id"] is None
    assert (await _get(client, org, f"/api/v1/agents/{agent_id}/versions/{version_id}"))["status"] == "draft"
    assert published_records(org, serde, agent_id) == []
    assert "ai_agent.published" not in audit_actions(org, agent_id)


async def test_concurrent_publishes_of_different_drafts_leave_exactly_one_published(
    client: httpx.AsyncClient, org: OrgHandle, serde: Serde
) -> None:
    channel = make_channel(org)
    for _ in range(4):
        created = await create_agent(client, org, channel)
        agent_id = created["agent"]["id"]
        drafts = [created["version"]["id"]] + [
            (await save_draft(client, org, agent_id, channel, system_prompt=f"draft {i}"))["id"] for i in range(2)
        ]
        responses = await asyncio.gather(*(_publish(client, org, agent_id, v) for v in drafts))
        codes = [r.status_code for r in responses]
        assert set(codes) <= {200, 409} and codes.count(200) >= 1, [r.text for r in responses]

        agent = await _get(client, org, f"/api/v1/agents/{agent_id}")
        versions = {v: await _get(client, org, f"/api/v1/agents/{agent_id}/versions/{v}") for v in drafts}
        published = [v for v, view in versions.items() if view["status"] == "published"]
        assert published == [agent["published_version_id"]]
        assert published_count(org, agent_id) == 1
        winners = [v for v, r in zip(drafts, responses, strict=True) if r.status_code == 200]
        for v in drafts:
            if v in winners and v != published[0]:
                assert versions[v]["status"] == "superseded"
        records = published_records(org, serde, agent_id)
        # One record per successful publish, in commit order: the last one names the version in effect.
        assert len(records) == codes.count(200)
        assert records[-1].version is not None and str(records[-1].version.version_id) == published[0]
        assert [str(r.version.version_id) for r in records if r.version] == sorted(
            winners, key=lambda v: versions[v]["published_at"]
        )
        for earlier, later in itertools.pairwise(records):
            assert later.previous_version_id == (earlier.version.version_id if earlier.version else None)


async def test_concurrent_publishes_of_the_same_draft_publish_once(
    client: httpx.AsyncClient, org: OrgHandle, serde: Serde
) -> None:
    channel = make_channel(org)
    created = await create_agent(client, org, channel)
    agent_id, version_id = created["agent"]["id"], created["version"]["id"]
    responses = await asyncio.gather(*(_publish(client, org, agent_id, version_id) for _ in range(3)))
    assert sorted(r.status_code for r in responses) == [200, 409, 409]
    assert len(published_records(org, serde, agent_id)) == 1
    assert audit_actions(org, agent_id).count("ai_agent.published") == 1


async def test_pause_then_resume_by_publishing_again(client: httpx.AsyncClient, org: OrgHandle, serde: Serde) -> None:
    channel = make_channel(org)
    created = await create_agent(client, org, channel)
    agent_id, version_id = created["agent"]["id"], created["version"]["id"]

    not_live = await client.post(f"/api/v1/agents/{agent_id}:pause", headers=org.headers())
    assert not_live.status_code == 409

    assert (await _publish(client, org, agent_id, version_id)).status_code == 200
    paused = await client.post(f"/api/v1/agents/{agent_id}:pause", headers=org.headers())
    assert paused.status_code == 200, paused.text
    view = paused.json()["data"]
    assert view["status"] == "paused" and view["published_version_id"] is None
    assert view["paused_at"] is not None and view["pause_reason"] == "manual"
    assert published_count(org, agent_id) == 0
    records = published_records(org, serde, agent_id)
    assert [r.change for r in records] == ["published", "paused"]
    assert records[1].version is not None and str(records[1].version.version_id) == version_id
    assert str(records[1].previous_version_id) == version_id
    assert (await client.post(f"/api/v1/agents/{agent_id}:pause", headers=org.headers())).status_code == 409
    listed = await client.get("/api/v1/agents", params={"status": "paused"}, headers=org.headers())
    assert agent_id in [a["id"] for a in listed.json()["data"]]

    resumed = await _publish(client, org, agent_id, version_id)
    assert resumed.status_code == 200
    agent = resumed.json()["data"]["agent"]
    assert agent["status"] == "published" and agent["paused_at"] is None and agent["pause_reason"] is None
    assert [r.change for r in published_records(org, serde, agent_id)] == ["published", "paused", "published"]
    assert audit_actions(org, agent_id) == [
        "ai_agent.created",
        "ai_agent.published",
        "ai_agent.paused",
        "ai_agent.published",
    ]


async def test_archive_emits_archived_with_the_last_published_version(
    client: httpx.AsyncClient, org: OrgHandle, serde: Serde
) -> None:
    channel = make_channel(org)
    live = await create_agent(client, org, channel)
    agent_id, version_id = live["agent"]["id"], live["version"]["id"]
    assert (await _publish(client, org, agent_id, version_id)).status_code == 200
    assert (await client.delete(f"/api/v1/agents/{agent_id}", headers=org.headers())).status_code == 204

    agent = await _get(client, org, f"/api/v1/agents/{agent_id}")
    assert agent["status"] == "archived" and agent["published_version_id"] is None
    assert published_count(org, agent_id) == 0
    records = published_records(org, serde, agent_id)
    assert [r.change for r in records] == ["published", "archived"]
    assert records[1].version is not None and str(records[1].version.version_id) == version_id
    assert str(records[1].previous_version_id) == version_id
    assert audit_actions(org, agent_id)[-1] == "ai_agent.archived"
    assert (await _publish(client, org, agent_id, version_id)).status_code == 409

    never = await create_agent(client, org, channel)
    assert (await client.delete(f"/api/v1/agents/{never['agent']['id']}", headers=org.headers())).status_code == 204
    only = published_records(org, serde, never["agent"]["id"])
    assert [(r.change, r.version, r.previous_version_id) for r in only] == [("archived", None, None)]


async def test_renaming_or_reprioritizing_a_live_agent_is_published(
    client: httpx.AsyncClient, org: OrgHandle, serde: Serde
) -> None:
    channel = make_channel(org)
    created = await create_agent(client, org, channel)
    agent_id, version_id = created["agent"]["id"], created["version"]["id"]
    # A draft-only agent is unknown to the dispatcher: nothing to publish.
    await client.patch(f"/api/v1/agents/{agent_id}", json={"priority": 5}, headers=org.headers())
    assert published_records(org, serde, agent_id) == []

    assert (await _publish(client, org, agent_id, version_id)).status_code == 200
    await client.patch(f"/api/v1/agents/{agent_id}", json={"description": "só texto"}, headers=org.headers())
    assert len(published_records(org, serde, agent_id)) == 1  # description is not dispatch-relevant
    await client.patch(f"/api/v1/agents/{agent_id}", json={"priority": 99, "name": "Topo"}, headers=org.headers())
    records = published_records(org, serde, agent_id)
    assert len(records) == 2 and records[1].change == "published"
    assert records[1].version is not None
    assert (records[1].version.priority, records[1].version.agent_name) == (99, "Topo")
    assert str(records[1].previous_version_id) == version_id


async def test_refused_admin_writes_leave_no_outbox_row(
    client: httpx.AsyncClient, org: OrgHandle, serde: Serde
) -> None:
    channel = make_channel(org)
    created = await create_agent(client, org, channel)
    agent_id, version_id = created["agent"]["id"], created["version"]["id"]
    for headers in (org.headers(Role.ADMIN, mfa=False), org.headers(Role.MANAGER)):
        response = await client.post(
            f"/api/v1/agents/{agent_id}:publish", json={"version_id": version_id}, headers=headers
        )
        assert response.status_code == 403
    assert published_records(org, serde, agent_id) == []
