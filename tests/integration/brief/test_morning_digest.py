"""What still waits is on today's Home: undecided proposals and open insights of the days before
are carried into today's to-do, and the digest of a day exists from its first minutes, before
any record of the day (the morning pass)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import create_engine, delete, insert

from switchboard.contracts import Serde, Topics
from switchboard.db.models.agents import AiAgentVersion, AiModel
from switchboard.db.models.autonomy import AgentDecision
from switchboard.kafka.producer import RecordProducer
from switchboard.settings import KafkaSettings
from tests.integration.brief.scene import (
    action,
    insight,
    make_scene,
    run_completed,
    running_brief,
    stored_digest,
    wait_for,
)
from tests.support.agents import tenant_session
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration


def _todo_keys(digest: dict[str, Any] | None) -> set[str] | None:
    if digest is None:
        return None
    return {str(item.get("action_id") or item.get("insight_key") or item.get("id")) for item in digest["todo"]}


async def test_what_still_waits_from_the_days_before_is_on_todays_todo(
    stack: StackEndpoints, migrated: None, topics: KafkaSettings, group_id: str
) -> None:
    scene = make_scene(stack.database_url)  # UTC: the org's today is the server's
    today = datetime.now(UTC).date()
    yesterday = today - timedelta(days=1)
    at_yesterday = datetime.combine(yesterday, time(15), tzinfo=UTC)
    long_ago = datetime.combine(today - timedelta(days=45), time(9), tzinfo=UTC)

    proposal = action("refund_order", "sales", summary="Refund order 42")
    waiting_in_run, decided_in_run = action("send_reminder", "booking"), action("send_offer", "sales")
    with tenant_session(scene.org) as session:  # the owner already approved one of the run's proposals
        session.add(
            AgentDecision(
                id=decided_in_run.action_id,
                org_id=scene.org_id,
                area="sales",
                action_type="send_offer",
                proposed_action={"tool": "send_offer"},
                autonomy_tier="propose",
                status="approved",
                decided_at=at_yesterday,
            )
        )
    records = [
        insight(
            scene,
            f"proposal:{proposal.action_id}",
            yesterday,
            at_yesterday,
            kind="proposed_action",
            area="sales",
            proposed_action=proposal,
        ),
        insight(scene, "crm:cold-leads", yesterday, at_yesterday),
        insight(scene, "crm:dismissed", yesterday, at_yesterday, status="dismissed"),
        insight(scene, "crm:too-old", long_ago.date(), long_ago),
    ]
    run = run_completed(scene, at_yesterday, cost=1_000, proposed=[waiting_in_run, decided_in_run])
    expected = {str(proposal.action_id), str(waiting_in_run.action_id), "crm:cold-leads"}

    serde = Serde.from_settings(topics)
    async with (
        running_brief(stack.database_url, topics, group_id),
        RecordProducer(topics, service="test", serde=serde) as producer,
    ):
        for record in records:
            await producer.send(Topics.INSIGHTS, record)
        await producer.send(Topics.RUN_COMPLETED, run)
        await wait_for(lambda: _todo_keys(stored_digest(scene, today)) == expected, what="today's carried to-do")
    todays = stored_digest(scene, today)
    assert todays is not None
    assert todays["pulse"]["runs"] == 0 and todays["done"] == [], "yesterday's work stays in yesterday's digest"
    assert _todo_keys(stored_digest(scene, yesterday)) == expected


async def test_the_morning_pass_composes_a_day_that_has_no_record_yet(
    stack: StackEndpoints, migrated: None, topics: KafkaSettings, group_id: str
) -> None:
    scene = make_scene(stack.database_url, time_zone="Asia/Tokyo")
    tokyo_today = datetime.now(ZoneInfo("Asia/Tokyo")).date()
    assert stored_digest(scene, tokyo_today) is None
    async with running_brief(stack.database_url, topics, group_id, morning_interval_s=300):
        digest = await wait_for(lambda: stored_digest(scene, tokyo_today), what="the morning digest")
    assert digest["date"] == tokyo_today.isoformat() and digest["time_zone"] == "Asia/Tokyo"
    assert digest["pulse"]["runs"] == 0 and digest["todo"] == []


async def test_an_agent_still_on_a_retired_model_is_on_todays_todo(
    stack: StackEndpoints, migrated: None, topics: KafkaSettings, group_id: str
) -> None:
    """The catalog retired the model a published agent answers with (it left the catalog file):
    the owner reads it on Home before the provider stops serving it and every run fails."""
    scene = make_scene(stack.database_url)
    retired = f"claude-retired-{uuid.uuid4().hex[:8]}"
    owner = create_engine(stack.database_owner_url)
    try:
        with owner.begin() as connection:
            connection.execute(
                insert(AiModel).values(
                    id=uuid.uuid4(),
                    provider="anthropic",
                    model=retired,
                    display_name="Retired for a test",
                    deprecated_at=datetime(2026, 11, 20, tzinfo=UTC),
                )
            )
        with tenant_session(scene.org) as session:
            session.get_one(AiAgentVersion, scene.version_id).model = retired
        today = datetime.now(UTC).date()
        async with running_brief(stack.database_url, topics, group_id, morning_interval_s=300):
            digest = await wait_for(lambda: stored_digest(scene, today), what="the morning digest")
        [item] = [i for i in digest["todo"] if i["kind"] == "model_retired"]
        assert (item["agent_id"], item["provider"], item["model"], item["retired_on"]) == (
            str(scene.agent_id),
            "anthropic",
            retired,
            "2026-11-20",
        )
        assert item["agent_name"] == "Receptionist" and retired in item["title"]
    finally:
        with owner.begin() as connection:
            connection.execute(delete(AiModel).where(AiModel.model == retired))
        owner.dispose()
