"""The run log [004 §4.3, SPEC §4]: keyset pages that never skip or repeat, filters, one run's
full trace with cost in micro-USD and USD, isolation and roles. Runs are inserted directly
(the runner writes them in production)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from switchboard.db.enums import Role
from switchboard.db.models.channels import Conversation
from switchboard.db.models.runs import AiAgentRun
from tests.support.agents import create_agent, make_channel, tenant_session
from tests.support.api import OrgHandle

pytestmark = pytest.mark.integration

BASE = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


class Fixture:
    """An org with one agent (two versions), two conversations, and runs inserted at chosen instants."""

    def __init__(self, org: OrgHandle, agent: dict[str, Any], channel: uuid.UUID) -> None:
        self.org = org
        self.agent_id = uuid.UUID(agent["agent"]["id"])
        self.version_id = uuid.UUID(agent["version"]["id"])
        self.channel = channel
        self.conversations = [self._conversation() for _ in range(2)]

    def _conversation(self) -> uuid.UUID:
        with tenant_session(self.org) as session:
            row = Conversation(
                org_id=self.org.org_id, channel_session_id=self.channel, chat_id=f"55{uuid.uuid4().int % 10**11}@c.us"
            )
            session.add(row)
            session.flush()
            return row.id

    def run(self, created_at: datetime, **values: Any) -> uuid.UUID:
        with tenant_session(self.org) as session:
            row = AiAgentRun(
                org_id=self.org.org_id,
                agent_id=self.agent_id,
                agent_version_id=self.version_id,
                conversation_id=values.pop("conversation_id", self.conversations[0]),
                channel_session_id=self.channel,
                status=values.pop("status", "completed"),
                created_at=created_at,
                **values,
            )
            session.add(row)
            session.flush()
            return row.id


@pytest.fixture
async def runs_fixture(client: httpx.AsyncClient, org: OrgHandle) -> Fixture:
    channel = make_channel(org)
    return Fixture(org, await create_agent(client, org, channel), channel)


async def _all_pages(
    client: httpx.AsyncClient, org: OrgHandle, path: str, params: dict[str, Any], limit: int
) -> list[str]:
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(100):
        query = {**params, "limit": limit, **({"cursor": cursor} if cursor else {})}
        page = await client.get(path, params=query, headers=org.headers(Role.MANAGER))
        assert page.status_code == 200, page.text
        body = page.json()
        assert len(body["data"]) <= limit
        seen += [r["id"] for r in body["data"]]
        cursor = body["next_cursor"]
        if cursor is None:
            return seen
    raise AssertionError("pagination did not end")


async def test_pagination_returns_every_run_exactly_once_in_stable_order(
    client: httpx.AsyncClient, runs_fixture: Fixture
) -> None:
    f = runs_fixture
    # Seven runs share one instant (the tie is broken by id), five are spread out.
    tied = [f.run(BASE) for _ in range(7)]
    spread = [f.run(BASE + timedelta(minutes=i + 1)) for i in range(5)]
    expected = [str(r) for r in reversed(spread)] + sorted((str(r) for r in tied), reverse=True)

    for limit in (1, 3, 5, 50):
        seen = await _all_pages(client, f.org, "/api/v1/runs", {}, limit)
        assert seen == expected, limit

    # Rows inserted while paging do not shift later pages (keyset, not OFFSET).
    first = await client.get("/api/v1/runs", params={"limit": 4}, headers=f.org.headers(Role.MANAGER))
    f.run(BASE + timedelta(hours=1))
    rest = await _all_pages(client, f.org, "/api/v1/runs", {"cursor": first.json()["next_cursor"]}, 4)
    assert [r["id"] for r in first.json()["data"]] + rest == expected


async def test_filters_by_agent_status_conversation_dates_and_dry_run(
    client: httpx.AsyncClient, runs_fixture: Fixture, org: OrgHandle
) -> None:
    f = runs_fixture
    other = await create_agent(client, org, f.channel)
    other_version = uuid.UUID(other["version"]["id"])
    other_agent = uuid.UUID(other["agent"]["id"])
    failed = f.run(BASE, status="failed", error_family="transientUpstream", vitality="failed")
    handoff = f.run(BASE + timedelta(hours=1), status="handoff", conversation_id=f.conversations[1])
    completed = f.run(BASE + timedelta(hours=2))
    dry = f.run(BASE + timedelta(hours=3), is_dry_run=True)
    with tenant_session(org) as session:
        row = AiAgentRun(
            org_id=org.org_id,
            agent_id=other_agent,
            agent_version_id=other_version,
            status="completed",
            created_at=BASE + timedelta(hours=4),
        )
        session.add(row)
        session.flush()
        foreign_agent_run = row.id

    async def ids(path: str = "/api/v1/runs", **params: Any) -> list[uuid.UUID]:
        response = await client.get(path, params=params, headers=org.headers(Role.MANAGER))
        assert response.status_code == 200, response.text
        return [uuid.UUID(r["id"]) for r in response.json()["data"]]

    assert await ids() == [foreign_agent_run, dry, completed, handoff, failed]
    assert await ids(agent_id=str(f.agent_id)) == [dry, completed, handoff, failed]
    assert await ids(f"/api/v1/agents/{f.agent_id}/runs") == [dry, completed, handoff, failed]
    assert await ids(agent_id=str(other_agent)) == [foreign_agent_run]
    assert await ids(status="failed") == [failed]
    assert await ids(status="handoff", agent_id=str(f.agent_id)) == [handoff]
    assert await ids(conversation_id=str(f.conversations[1])) == [handoff]
    # from inclusive, to exclusive; a naive instant is UTC.
    window = {"from": (BASE + timedelta(hours=1)).isoformat(), "to": (BASE + timedelta(hours=3)).isoformat()}
    assert await ids(**window) == [completed, handoff]
    assert await ids(**{"from": "2026-03-02T14:00:00"}) == [foreign_agent_run, dry, completed]
    assert await ids(dry_run=True) == [dry]
    assert dry not in await ids(dry_run=False)

    bad = await client.get("/api/v1/runs", params={"status": "exploded"}, headers=org.headers(Role.MANAGER))
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "validation_error"
    backwards = await client.get(
        "/api/v1/runs",
        params={"from": (BASE + timedelta(hours=2)).isoformat(), "to": BASE.isoformat()},
        headers=org.headers(Role.MANAGER),
    )
    assert backwards.status_code == 422
    unknown_agent = await client.get(f"/api/v1/agents/{uuid.uuid4()}/runs", headers=org.headers(Role.MANAGER))
    assert unknown_agent.status_code == 404


async def test_one_run_with_its_full_trace(client: httpx.AsyncClient, runs_fixture: Fixture) -> None:
    f = runs_fixture
    parent = f.run(BASE, status="failed", vitality="dead", error_family="processLost")
    started = BASE + timedelta(seconds=1)
    trace = [
        {
            "step": 1,
            "tool_name": "crm_search_contacts",
            "args": {"query": "Ana"},
            "result": {"contacts": [{"id": "c1"}]},
            "started_at": started.isoformat(),
            "ended_at": (started + timedelta(milliseconds=420)).isoformat(),
        },
        {
            "step": 2,
            "tool_name": "crm_send_whatsapp_message",
            "args": {"text": "Olá", "api_key": "sk-ant-api03-THIS-MUST-NOT-LEAVE-THE-API-0000"},
            "result": None,
            "error": {"code": "channel_down", "message": "WAHA answered 503"},
            "started_at": (started + timedelta(seconds=1)).isoformat(),
            "ended_at": (started + timedelta(seconds=2)).isoformat(),
        },
    ]
    run_id = f.run(
        BASE + timedelta(minutes=1),
        status="completed",
        vitality="productive",
        error_family=None,
        wake_reason="recovery",
        attempt=2,
        parent_run_id=parent,
        provider="anthropic",
        model="claude-sonnet-4-6",
        tokens_in=1234,
        tokens_out=567,
        cost_micros=4210,
        latency_ms=3200,
        steps_count=2,
        tool_calls=trace,
        final_text="Olá Ana! O produto X custa R$ 99.",
        would_send_to={"channel_session_id": str(f.channel), "chat_id": "5511999999999@c.us"},
        started_at=BASE + timedelta(minutes=1),
        completed_at=BASE + timedelta(minutes=1, seconds=3),
    )

    response = await client.get(f"/api/v1/runs/{run_id}", headers=f.org.headers(Role.MANAGER))
    assert response.status_code == 200, response.text
    run = response.json()["data"]
    assert run["status"] == "completed" and run["vitality"] == "productive" and run["error_family"] is None
    assert run["wake_reason"] == "recovery" and run["attempt"] == 2 and run["parent_run_id"] == str(parent)
    assert run["is_dry_run"] is False and run["agent_id"] == str(f.agent_id)
    assert (run["tokens_in"], run["tokens_out"], run["latency_ms"], run["steps_count"]) == (1234, 567, 3200, 2)
    assert run["cost_micro_usd"] == 4210 and run["cost_usd"] == "0.004210"
    assert run["final_text"].startswith("Olá Ana") and run["would_send_to"]["chat_id"] == "5511999999999@c.us"
    first, second = run["trace"]
    assert first["tool_name"] == "crm_search_contacts" and first["arguments"] == {"query": "Ana"}
    assert first["result"] == {"contacts": [{"id": "c1"}]} and first["duration_ms"] == 420 and first["error"] is None
    assert second["error"] == {"code": "channel_down", "message": "WAHA answered 503"}
    assert second["duration_ms"] == 1000 and second["step"] == 2
    # Defense in depth: a secret that slipped into a trace never leaves the API.
    assert "THIS-MUST-NOT-LEAVE" not in response.text

    parent_view = (await client.get(f"/api/v1/runs/{parent}", headers=f.org.headers())).json()["data"]
    assert parent_view["error_family"] == "processLost" and parent_view["vitality"] == "dead"
    assert parent_view["trace"] == [] and parent_view["cost_usd"] == "0.000000"

    listed = await client.get("/api/v1/runs", headers=f.org.headers(Role.MANAGER))
    summary = next(r for r in listed.json()["data"] if r["id"] == str(run_id))
    assert "trace" not in summary and summary["cost_usd"] == "0.004210"

    missing = await client.get(f"/api/v1/runs/{uuid.uuid4()}", headers=f.org.headers())
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


async def test_another_orgs_runs_are_invisible(client: httpx.AsyncClient, make_org: Any) -> None:
    org_a, org_b = make_org(), make_org()
    channel_b = make_channel(org_b)
    fixture_b = Fixture(org_b, await create_agent(client, org_b, channel_b), channel_b)
    run_b = fixture_b.run(BASE)

    response = await client.get(f"/api/v1/runs/{run_b}", headers=org_a.headers(Role.MANAGER))
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    listed = await client.get(
        "/api/v1/runs", params={"agent_id": str(fixture_b.agent_id)}, headers=org_a.headers(Role.MANAGER)
    )
    assert listed.status_code == 200 and listed.json()["data"] == []
    everything = await client.get("/api/v1/runs", headers=org_a.headers(Role.ADMIN))
    assert str(run_b) not in {r["id"] for r in everything.json()["data"]}
    # Org B itself sees it.
    assert (await client.get(f"/api/v1/runs/{run_b}", headers=org_b.headers(Role.MANAGER))).status_code == 200


async def test_runs_need_the_manager_role(client: httpx.AsyncClient, runs_fixture: Fixture) -> None:
    f = runs_fixture
    run_id = f.run(BASE)
    for path in ("/api/v1/runs", f"/api/v1/runs/{run_id}", f"/api/v1/agents/{f.agent_id}/runs"):
        viewer = await client.get(path, headers=f.org.headers(Role.VIEWER))
        assert viewer.status_code == 403 and viewer.json()["error"]["code"] == "forbidden", path
        assert (await client.get(path)).status_code == 401
        for role, mfa in ((Role.MANAGER, False), (Role.ADMIN, False), (Role.ADMIN, True)):
            assert (await client.get(path, headers=f.org.headers(role, mfa=mfa))).status_code == 200, (path, role)
