"""The Home endpoints: the stored digest read as-is, to-do items (and today's digest follows
them), month usage per org and agent, budget incidents paged newest first; another org's
resource is a 404."""

from __future__ import annotations

import uuid
from datetime import date, datetime, timedelta

import httpx
import pytest

from switchboard.areas import area_slugs
from switchboard.db.daily_brief import HOME_SECTIONS, org_today
from switchboard.db.enums import Role
from switchboard.db.models.autonomy import WorkspaceDailyBrief
from switchboard.db.models.budgets import BudgetIncident
from switchboard.db.usage import fold_usage, record_usage
from tests.integration.brief.scene import Scene, make_scene
from tests.support.agents import tenant_session
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration


@pytest.fixture
def scene(stack: StackEndpoints, migrated: None) -> Scene:
    return make_scene(stack.database_url, time_zone="Asia/Tokyo")


def _viewer(scene: Scene) -> dict[str, str]:
    return scene.org.headers(Role.VIEWER)


async def test_the_daily_brief_is_the_stored_row(
    client: httpx.AsyncClient, scene: Scene, stack: StackEndpoints
) -> None:
    digest = {"date": "2026-11-20", "pulse": {"text": "2 runs"}, "done": [], "todo": [], "planets": []}
    with tenant_session(scene.org) as session:
        session.add(WorkspaceDailyBrief(org_id=scene.org_id, day=date(2026, 11, 20), digest=digest))
    got = await client.get("/api/v1/home/daily-brief", params={"date": "2026-11-20"}, headers=_viewer(scene))
    assert got.status_code == 200, got.text
    assert got.json()["data"]["digest"] == digest and got.json()["data"]["date"] == "2026-11-20"
    missing = await client.get("/api/v1/home/daily-brief", params={"date": "2026-11-21"}, headers=_viewer(scene))
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    other = make_scene(stack.database_url)
    hidden = await client.get("/api/v1/home/daily-brief", params={"date": "2026-11-20"}, headers=_viewer(other))
    assert hidden.status_code == 404
    bad = await client.get("/api/v1/home/daily-brief", params={"date": "20-11-2026"}, headers=_viewer(scene))
    assert bad.status_code == 422


async def test_todos_show_in_todays_digest_until_done(
    client: httpx.AsyncClient, scene: Scene, stack: StackEndpoints
) -> None:
    with tenant_session(scene.org) as session:
        today = org_today(session, scene.org_id)  # Tokyo's day, not the server's
        session.add(WorkspaceDailyBrief(org_id=scene.org_id, day=today, digest={"todo": [{"kind": "insight"}]}))
    headers = scene.org.headers(Role.MANAGER)
    created = await client.post(
        "/api/v1/home/todos",
        json={"text": "  Renew the domain  ", "conversation_id": str(scene.conversation_id)},
        headers=headers,
    )
    assert created.status_code == 201, created.text
    todo = created.json()["data"]
    assert todo["text"] == "Renew the domain" and todo["status"] == "open" and todo["source"] == "api"
    brief = await client.get("/api/v1/home/daily-brief", headers=_viewer(scene))
    items = brief.json()["data"]["digest"]["todo"]
    assert [i["kind"] for i in items] == ["insight", "todo"]
    assert items[1]["id"] == todo["id"] and items[1]["links"]["done"] == f"/api/v1/home/todos/{todo['id']}:done"

    other = make_scene(stack.database_url)
    foreign = await client.post(f"/api/v1/home/todos/{todo['id']}:done", headers=other.org.headers(Role.MANAGER))
    assert foreign.status_code == 404
    cross = await client.post(
        "/api/v1/home/todos", json={"text": "x", "conversation_id": str(other.conversation_id)}, headers=headers
    )
    assert cross.status_code == 404
    assert (await client.post("/api/v1/home/todos", json={"text": "   "}, headers=headers)).status_code == 422

    done = await client.post(f"/api/v1/home/todos/{todo['id']}:done", headers=headers)
    assert done.status_code == 200 and done.json()["data"]["status"] == "done"
    again = await client.post(f"/api/v1/home/todos/{todo['id']}:done", headers=headers)
    assert again.json()["data"]["done_at"] == done.json()["data"]["done_at"]
    brief = await client.get("/api/v1/home/daily-brief", headers=_viewer(scene))
    assert [i["kind"] for i in brief.json()["data"]["digest"]["todo"]] == ["insight"]


async def test_usage_per_org_and_agent(client: httpx.AsyncClient, scene: Scene) -> None:
    with tenant_session(scene.org) as session:
        record_usage(session, scene.org_id, scene.agent_id, date(2026, 9, 3), 1000, 200, 30_000)
        fold_usage(session)  # this one into the counters; the next one stays in the ledger
        record_usage(session, scene.org_id, scene.agent_id, date(2026, 9, 3), 500, 100, 12_000)
        record_usage(session, scene.org_id, None, date(2026, 8, 3), 1, 1, 1)
    got = await client.get("/api/v1/usage", params={"month": "2026-09"}, headers=_viewer(scene))
    assert got.status_code == 200, got.text
    assert got.json()["data"] == {
        "month": "2026-09",
        "organization": {"input_tokens": 1500, "output_tokens": 300, "cost_micros": 42_000, "run_count": 2},
        "agents": [
            {
                "agent_id": str(scene.agent_id),
                "agent_name": "Receptionist",
                "input_tokens": 1500,
                "output_tokens": 300,
                "cost_micros": 42_000,
                "run_count": 2,
            }
        ],
    }
    empty = await client.get("/api/v1/usage", params={"month": "2026-07"}, headers=_viewer(scene))
    assert empty.json()["data"]["organization"]["run_count"] == 0 and empty.json()["data"]["agents"] == []
    bad = await client.get("/api/v1/usage", params={"month": "2026-13"}, headers=_viewer(scene))
    assert bad.status_code == 422


async def test_budget_incidents_newest_first_in_pages(client: httpx.AsyncClient, scene: Scene) -> None:
    base = datetime.fromisoformat("2026-10-01T00:00:00+00:00")
    ids = []
    with tenant_session(scene.org) as session:
        for i, (month, severity) in enumerate(((8, "warning"), (8, "hard"), (9, "warning"))):
            incident = BudgetIncident(
                id=uuid.uuid4(),
                org_id=scene.org_id,
                scope="agent",
                agent_id=scene.agent_id,
                severity=severity,
                period_month=date(2026, month, 1),
                spent_micros=1,
                created_at=base + timedelta(minutes=i),
            )
            session.add(incident)
            ids.append(str(incident.id))
    first = await client.get("/api/v1/budget-incidents", params={"limit": 2}, headers=_viewer(scene))
    assert first.status_code == 200, first.text
    assert [i["id"] for i in first.json()["data"]] == [ids[2], ids[1]]
    rest = await client.get(
        "/api/v1/budget-incidents", params={"limit": 2, "cursor": first.json()["next_cursor"]}, headers=_viewer(scene)
    )
    assert [i["id"] for i in rest.json()["data"]] == [ids[0]] and rest.json()["next_cursor"] is None


async def test_pins_reorder_todays_digest_at_once_and_unknown_ones_are_refused(
    client: httpx.AsyncClient, scene: Scene
) -> None:
    planets = [{"area": a, "label": a, "status": "quiet", "done": 0, "open": 0, "pinned": False} for a in area_slugs()]
    digest = {"sections": list(HOME_SECTIONS), "pulse": {}, "done": [], "todo": [], "planets": planets}
    with tenant_session(scene.org) as session:
        today = org_today(session, scene.org_id)
        session.add(WorkspaceDailyBrief(org_id=scene.org_id, day=today, digest=digest))
    assert (await client.get("/api/v1/home/prefs", headers=_viewer(scene))).json()["data"] == {
        "pinned_sections": [],
        "pinned_areas": [],
    }
    manager = scene.org.headers(Role.MANAGER)
    body = {"pinned_sections": ["todo", "todo"], "pinned_areas": ["sales", "crm"]}
    assert (await client.put("/api/v1/home/prefs", json=body, headers=_viewer(scene))).status_code == 403
    saved = await client.put("/api/v1/home/prefs", json=body, headers=manager)
    assert saved.status_code == 200, saved.text
    assert saved.json()["data"] == {"pinned_sections": ["todo"], "pinned_areas": ["sales", "crm"]}

    stored = (await client.get("/api/v1/home/daily-brief", headers=_viewer(scene))).json()["data"]["digest"]
    assert stored["sections"] == ["todo", "pulse", "done", "planets"]
    order = [p["area"] for p in stored["planets"]]
    assert order[:2] == ["sales", "crm"] and sorted(order) == sorted(area_slugs())
    assert [p["area"] for p in stored["planets"] if p["pinned"]] == ["sales", "crm"]

    refused = await client.put("/api/v1/home/prefs", json={"pinned_areas": ["mars"]}, headers=manager)
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "home_prefs_invalid"
    assert refused.json()["error"]["details"]["areas"] == ["mars"]
    assert (await client.get("/api/v1/home/prefs", headers=_viewer(scene))).json()["data"]["pinned_areas"] == [
        "sales",
        "crm",
    ], "a refused change changes nothing"
