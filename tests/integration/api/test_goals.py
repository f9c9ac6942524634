"""``/api/v1/goals``: the owner sees the ``/goal`` and ``/loop`` work of the agents and can stop it."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from switchboard.db.enums import Role
from switchboard.db.models.audit import AuditLogEntry
from switchboard.db.models.slash import ConversationGoal
from tests.integration.db.factories import build_conversation_goals
from tests.support.api import OrgHandle

pytestmark = pytest.mark.integration


def _goal(db: Callable[[uuid.UUID], Session], org: OrgHandle, **values: object) -> uuid.UUID:
    session = db(org.org_id)
    goal = build_conversation_goals(session, org.org_id)
    for name, value in values.items():
        setattr(goal, name, value)
    session.add(goal)
    session.flush()
    goal_id = goal.id  # read before the commit: a new transaction has no tenant set (row-level security)
    session.commit()
    return goal_id


async def test_the_owner_lists_active_goals_with_their_spend_and_stops_one(
    client: httpx.AsyncClient, org: OrgHandle, db: Callable[[uuid.UUID], Session]
) -> None:
    running = _goal(db, org, spent_micros=7_250_000, segments=2)
    finished = _goal(db, org, status="done", end_reason="goal_complete called")

    listed = await client.get("/api/v1/goals", params={"status": "active"}, headers=org.headers(Role.VIEWER))
    assert listed.status_code == 200, listed.text
    [shown] = listed.json()["data"]
    assert (shown["id"], shown["status"], shown["kind"]) == (str(running), "active", "goal")
    assert (shown["budget_micros"], shown["spent_micros"], shown["segments"]) == (50_000_000, 7_250_000, 2)
    every = await client.get("/api/v1/goals", headers=org.headers(Role.VIEWER))
    assert {g["id"] for g in every.json()["data"]} == {str(running), str(finished)}

    path = f"/api/v1/goals/{running}:stop"
    assert (await client.post(path, headers=org.headers(Role.VIEWER))).status_code == 403
    stopped = await client.post(path, headers=org.headers(Role.MANAGER))
    assert stopped.status_code == 200, stopped.text
    assert (stopped.json()["data"]["status"], stopped.json()["data"]["end_reason"]) == (
        "stopped",
        "stopped through the API",
    )
    again = await client.post(path, headers=org.headers(Role.MANAGER))
    assert again.status_code == 409 and again.json()["error"]["code"] == "goal_not_active", again.text
    done = await client.post(f"/api/v1/goals/{finished}:stop", headers=org.headers(Role.MANAGER))
    assert done.status_code == 409 and done.json()["error"]["details"] == {"status": "done"}
    missing = await client.post(f"/api/v1/goals/{uuid.uuid4()}:stop", headers=org.headers(Role.MANAGER))
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"

    session = db(org.org_id)
    assert session.scalar(select(ConversationGoal.status).where(ConversationGoal.id == running)) == "stopped"
    audited = session.scalars(select(AuditLogEntry.action).where(AuditLogEntry.target_id == str(running))).all()
    assert audited == ["goal.stopped"]


async def test_goals_are_the_orgs_own(
    client: httpx.AsyncClient, make_org: Callable[..., OrgHandle], db: Callable[[uuid.UUID], Session]
) -> None:
    mine, theirs = make_org(), make_org()
    foreign = _goal(db, theirs)
    assert (await client.get("/api/v1/goals", headers=mine.headers())).json()["data"] == []
    stolen = await client.post(f"/api/v1/goals/{foreign}:stop", headers=mine.headers())
    assert stolen.status_code == 404
