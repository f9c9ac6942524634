"""``/api/v1/insights``: list with filters and paging (viewer), dismiss (manager) — idempotent, audited,
announced to the brief through the outbox; another org's insight is a 404."""

from __future__ import annotations

import uuid

import httpx
import pytest
from sqlalchemy import select

from switchboard.contracts import Insight, Serde, Topics
from switchboard.db.enums import Role
from switchboard.db.insights import upsert_insight
from switchboard.db.models import AgentDecision, AuditLogEntry, OutboxEvent, WorkspaceInsight
from switchboard.settings import KafkaSettings
from tests.support.agents import tenant_session
from tests.support.api import OrgHandle, create_org
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration


def seed(org: OrgHandle, keys: list[tuple[str, str]]) -> dict[str, uuid.UUID]:
    ids: dict[str, uuid.UUID] = {}
    with tenant_session(org) as session:
        for key, area in keys:
            ids[key] = upsert_insight(session, org_id=org.org_id, dedupe_key=key, area=area, title=f"About {key}").id
    return ids


async def test_list_filter_page_and_dismiss(
    client: httpx.AsyncClient, stack: StackEndpoints, kafka_settings: KafkaSettings
) -> None:
    org = create_org(stack.database_url)
    ids = seed(org, [("analysis:crm:a", "crm"), ("analysis:crm:b", "crm"), ("analysis:sales:c", "sales")])
    viewer, manager = org.headers(Role.VIEWER), org.headers(Role.MANAGER)

    first = await client.get("/api/v1/insights", params={"area": "crm", "limit": 1}, headers=viewer)
    assert first.status_code == 200, first.text
    rest = await client.get(
        "/api/v1/insights", params={"area": "crm", "cursor": first.json()["next_cursor"]}, headers=viewer
    )
    keys = [i["insight_key"] for i in first.json()["data"] + rest.json()["data"]]
    assert sorted(keys) == ["analysis:crm:a", "analysis:crm:b"] and rest.json()["next_cursor"] is None
    bad = await client.get("/api/v1/insights", params={"status": "gone"}, headers=viewer)
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "insight_filter_invalid"

    assert (await client.post(f"/api/v1/insights/{ids['analysis:crm:a']}:dismiss", headers=viewer)).status_code == 403
    for _ in range(2):  # idempotent
        done = await client.post(f"/api/v1/insights/{ids['analysis:crm:a']}:dismiss", headers=manager)
        assert done.status_code == 200, done.text
        assert done.json()["data"]["status"] == "dismissed"
    dismissed = await client.get("/api/v1/insights", params={"status": "dismissed"}, headers=viewer)
    assert [i["id"] for i in dismissed.json()["data"]] == [str(ids["analysis:crm:a"])]

    # A re-run of the analysis refreshes it and keeps it dismissed.
    with tenant_session(org) as session:
        again = upsert_insight(session, org_id=org.org_id, dedupe_key="analysis:crm:a", area="crm", title="Newer")
    assert again.status == "dismissed"

    with tenant_session(org) as session:
        audits = session.scalars(
            select(AuditLogEntry.action).where(
                AuditLogEntry.org_id == org.org_id, AuditLogEntry.target_id == str(ids["analysis:crm:a"])
            )
        ).all()
    assert audits == ["insight.dismissed"], "audited once: the second dismissal changed nothing"
    serde = Serde.from_settings(kafka_settings)
    with tenant_session(org) as session:
        payloads = session.scalars(
            select(OutboxEvent.payload).where(
                OutboxEvent.topic == Topics.INSIGHTS.name, OutboxEvent.key == str(org.org_id).encode()
            )
        ).all()
    records: list[Insight] = [serde.decode(Topics.INSIGHTS, p) for p in payloads]  # type: ignore[misc]
    assert [(r.insight_key, r.status.value) for r in records] == [("analysis:crm:a", "dismissed")]

    other = create_org(stack.database_url)
    hidden = await client.post(f"/api/v1/insights/{ids['analysis:crm:b']}:dismiss", headers=other.headers(Role.MANAGER))
    assert hidden.status_code == 404
    assert (await client.get("/api/v1/insights", headers=other.headers(Role.VIEWER))).json()["data"] == []


async def test_seen_then_actioned_with_the_chosen_suggestion_and_it_stays_actioned(
    client: httpx.AsyncClient, stack: StackEndpoints, kafka_settings: KafkaSettings
) -> None:
    """The Home card's "approve" (``:action``) and ``:seen``: audited once, announced to the brief,
    final (a later dismissal is a 409); an unknown suggestion is a 422 and changes nothing."""
    org = create_org(stack.database_url)
    with tenant_session(org) as session:
        insight = upsert_insight(
            session,
            org_id=org.org_id,
            dedupe_key="analysis:booking:no_shows",
            area="booking",
            title="Three no-shows this week",
            suggested_actions=[{"action_type": "send_reminder", "label": "Remind them", "arguments_json": "{}"}],
        ).id
    manager = org.headers(Role.MANAGER)
    path = f"/api/v1/insights/{insight}"

    assert (await client.post(f"{path}:seen", headers=org.headers(Role.VIEWER))).status_code == 403
    for _ in range(2):
        seen = await client.post(f"{path}:seen", headers=manager)
        assert seen.status_code == 200 and seen.json()["data"]["status"] == "seen", seen.text

    unknown = await client.post(f"{path}:action", json={"action_type": "delete_everything"}, headers=manager)
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "insight_action_unknown"
    for _ in range(2):
        done = await client.post(f"{path}:action", json={"action_type": "send_reminder"}, headers=manager)
        assert done.status_code == 200 and done.json()["data"]["status"] == "actioned", done.text
    assert (await client.post(f"{path}:seen", headers=manager)).json()["data"]["status"] == "actioned"
    late = await client.post(f"{path}:dismiss", headers=manager)
    assert late.status_code == 409 and late.json()["error"]["code"] == "insight_already_actioned"

    with tenant_session(org) as session:
        audits = session.execute(
            select(AuditLogEntry.action, AuditLogEntry.details).where(
                AuditLogEntry.org_id == org.org_id, AuditLogEntry.target_id == str(insight)
            )
        ).all()
        payloads = session.scalars(
            select(OutboxEvent.payload).where(OutboxEvent.topic == Topics.INSIGHTS.name).order_by(OutboxEvent.id)
        ).all()
    assert sorted(action for action, _ in audits) == ["insight.actioned", "insight.seen"]
    assert {action: details.get("action_type") for action, details in audits}["insight.actioned"] == "send_reminder"
    serde = Serde.from_settings(kafka_settings)
    records: list[Insight] = [serde.decode(Topics.INSIGHTS, p) for p in payloads]  # type: ignore[misc]
    assert [r.status.value for r in records if r.insight_id == insight] == ["seen", "actioned"]


async def test_an_insight_backed_by_a_decision_is_answered_through_the_decision(
    client: httpx.AsyncClient, stack: StackEndpoints
) -> None:
    org = create_org(stack.database_url)
    ids = seed(org, [("analysis:crm:plain", "crm")])
    with tenant_session(org) as session:
        decision = AgentDecision(
            org_id=org.org_id,
            area="crm",
            action_type="send_offer",
            proposed_action={"tool": "send_offer", "args": {}},
            autonomy_tier="propose",
        )
        session.add(decision)
        session.flush()
        row = session.get(WorkspaceInsight, ids["analysis:crm:plain"])
        assert row is not None
        row.agent_decision_id = decision.id
        session.flush()
    refused = await client.post(
        f"/api/v1/insights/{ids['analysis:crm:plain']}:action", headers=org.headers(Role.MANAGER)
    )
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "insight_decided_by_approval"
