"""What still waits is on today's Home: undecided proposals and open insights of the days before
are carried into today's to-do, and the digest of a day exists from its first minutes, before
any record of the day (the morning pass)."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from switchboard.contracts import Serde, Topics
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
