"""``/api/v1/followups``: the owner sees what agents promised and takes a callback back — once,
audited; a callback that already fired cannot be cancelled; another org's is a 404."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import select

from switchboard.db.enums import Role
from switchboard.db.models.audit import AuditLogEntry
from switchboard.db.models.followups import ScheduledFollowup
from tests.integration.brief.scene import make_scene
from tests.support.agents import tenant_session
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration


async def test_list_and_cancel_a_promised_callback(client: httpx.AsyncClient, stack: StackEndpoints) -> None:
    scene = make_scene(stack.database_url)
    now = datetime.now(UTC)
    with tenant_session(scene.org) as session:
        promised = ScheduledFollowup(
            org_id=scene.org_id,
            conversation_id=scene.conversation_id,
            agent_id=scene.agent_id,
            due_at=now + timedelta(days=1),
            reason="call back about the sofa",
        )
        fired = ScheduledFollowup(
            org_id=scene.org_id,
            conversation_id=scene.conversation_id,
            due_at=now - timedelta(hours=1),
            reason="already done",
            status="fired",
            fired_at=now,
        )
        session.add_all([promised, fired])
        session.flush()
        promised_id, fired_id = promised.id, fired.id
    manager = scene.org.headers(Role.MANAGER)

    waiting = await client.get("/api/v1/followups", params={"status": "scheduled"}, headers=manager)
    assert waiting.status_code == 200, waiting.text
    assert [(f["id"], f["reason"]) for f in waiting.json()["data"]] == [(str(promised_id), "call back about the sofa")]
    everything = await client.get(
        "/api/v1/followups", params={"conversation_id": str(scene.conversation_id)}, headers=manager
    )
    assert {f["id"] for f in everything.json()["data"]} == {str(promised_id), str(fired_id)}
    bad = await client.get("/api/v1/followups", params={"status": "maybe"}, headers=manager)
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "followup_filter_invalid"

    for _ in range(2):  # idempotent
        cancelled = await client.post(f"/api/v1/followups/{promised_id}:cancel", headers=manager)
        assert cancelled.status_code == 200 and cancelled.json()["data"]["status"] == "cancelled", cancelled.text
    too_late = await client.post(f"/api/v1/followups/{fired_id}:cancel", headers=manager)
    assert too_late.status_code == 409 and too_late.json()["error"]["code"] == "followup_not_scheduled"
    assert (await client.get("/api/v1/followups", params={"status": "scheduled"}, headers=manager)).json()["data"] == []

    with tenant_session(scene.org) as session:
        audits = session.scalars(
            select(AuditLogEntry.action).where(
                AuditLogEntry.org_id == scene.org_id, AuditLogEntry.target_id == str(promised_id)
            )
        ).all()
    assert audits == ["followup.cancelled"]
    stranger = make_scene(stack.database_url).org.headers(Role.MANAGER)
    assert (await client.post(f"/api/v1/followups/{promised_id}:cancel", headers=stranger)).status_code == 404
    assert (await client.get("/api/v1/followups", headers=stranger)).json()["data"] == []
