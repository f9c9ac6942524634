"""The Home digest materialized from the real topics: a known day gives the expected document,
and replaying the topics from the start with a fresh consumer group gives it again."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import delete, select

from services.api.analysis.service import InsightDecidedByPromotion, mark_actioned
from services.api.autonomy.service import _promotion_row, decide_promotion
from switchboard.contracts import Insight, RunCompleted, Serde, Topics
from switchboard.contracts.enums import ErrorFamily, RunStatus, Vitality
from switchboard.contracts.records import Action
from switchboard.db.models import AiAgentRun, Message, OutboxEvent
from switchboard.db.models.autonomy import AgentDecision, WorkspaceDailyBrief, WorkspaceHomePrefs, WorkspaceInsight
from switchboard.db.models.brief import BriefFact, WorkspaceTodo
from switchboard.db.models.notifications import RunDelivery
from switchboard.db.todos import add_todo
from switchboard.kafka.producer import RecordProducer
from switchboard.run_outcomes import WITH_HUMANS
from switchboard.settings import KafkaSettings
from tests.integration.brief.scene import (
    Scene,
    action,
    handoff,
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

DAY = date(2026, 11, 20)
TZ = "America/Sao_Paulo"  # UTC-3: 02:30Z on the 21st is still the 20th there


def _utc(day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 11, day, hour, minute, tzinfo=UTC)


def _seed_owner_state(scene: Scene) -> uuid.UUID:
    """Three approvals of one action type (a promote suggestion), pinned prefs, one open /todo."""
    with tenant_session(scene.org) as session:
        for _ in range(3):
            session.add(
                AgentDecision(
                    org_id=scene.org_id,
                    area="booking",
                    action_type="send_reminder",
                    proposed_action={"to": "x"},
                    autonomy_tier="propose",
                    status="approved",
                    decided_at=_utc(19, 10),
                )
            )
        session.add(WorkspaceHomePrefs(org_id=scene.org_id, pinned_sections=["todo"], pinned_areas=["crm"]))
        todo = add_todo(session, scene.org_id, "Call the flower supplier", "api")
        return todo.id


def _expected(scene: Scene, todo_id: uuid.UUID, proposal: Action, cold_insight_id: uuid.UUID) -> dict[str, Any]:
    with tenant_session(scene.org) as session:
        created = session.get_one(WorkspaceTodo, todo_id)
        created_at = created.created_at.isoformat()
    return {
        "date": "2026-11-20",
        "time_zone": TZ,
        "sections": ["todo", "pulse", "done", "planets"],
        "pulse": {
            "text": "3 runs · 2 replies · 1 handoff · spend $0.18 (yesterday $0.07)",
            "runs": 3,
            "replies": 2,
            "undelivered": 0,
            "unanswered": 0,
            "handoffs": 1,
            "spend_micros": 180_000,
            "spend_yesterday_micros": 70_000,
        },
        "done": [
            {"action_type": "send_reminder", "area": "booking", "count": 3, "text": "sent 3 reminders"},
            {"action_type": "create_lead", "area": "crm", "count": 1, "text": "created 1 lead"},
        ],
        "todo": [
            {
                "kind": "promote",
                "area": "booking",
                "action_type": "send_reminder",
                "approvals": 3,
                "title": "You approved “send_reminder” 3 times: let agents do it on their own?",
                "links": {
                    "approve": "/api/v1/autonomy/booking/promotions/send_reminder:accept",
                    "ignore": "/api/v1/autonomy/booking/promotions/send_reminder:dismiss",
                },
            },
            {
                "kind": "proposed_action",
                "action_id": str(proposal.action_id),
                "action_type": "refund_order",
                "area": "sales",
                "title": "Refund order 42?",
                "body": "The customer was charged twice.",
                "insight_key": f"proposal:{proposal.action_id}",
                "links": {
                    "approve": f"/api/v1/decisions/{proposal.action_id}:approve",
                    "ignore": f"/api/v1/decisions/{proposal.action_id}:reject",
                },
            },
            {
                "kind": "insight",
                "insight_id": str(cold_insight_id),
                "insight_key": "crm:cold-leads",
                "area": "crm",
                "title": "4 leads went cold",
                "body": "No answer for 7 days.",
                "status": "new",
                "suggested_actions": [],
                "links": {
                    "approve": f"/api/v1/insights/{cold_insight_id}:action",
                    "ignore": f"/api/v1/insights/{cold_insight_id}:dismiss",
                },
            },
            {
                "kind": "todo",
                "id": str(todo_id),
                "text": "Call the flower supplier",
                "source": "api",
                "conversation_id": None,
                "created_at": created_at,
                "links": {"done": f"/api/v1/home/todos/{todo_id}:done"},
            },
        ],
        "planets": [
            {"area": "crm", "label": "CRM", "status": "attention", "done": 1, "open": 1, "pinned": True},
            {"area": "booking", "label": "Booking", "status": "attention", "done": 3, "open": 1, "pinned": False},
            {"area": "sales", "label": "Sales", "status": "attention", "done": 0, "open": 1, "pinned": False},
            {"area": "marketing", "label": "Marketing", "status": "quiet", "done": 0, "open": 0, "pinned": False},
            {"area": "content", "label": "Content", "status": "quiet", "done": 0, "open": 0, "pinned": False},
            {"area": "web", "label": "Web", "status": "quiet", "done": 0, "open": 0, "pinned": False},
            {"area": "cross", "label": "Cross-area", "status": "quiet", "done": 0, "open": 0, "pinned": False},
        ],
    }


async def test_a_known_day_gives_the_expected_digest_and_a_replay_gives_it_again(
    stack: StackEndpoints, migrated: None, topics: KafkaSettings, group_id: str
) -> None:
    scene = make_scene(stack.database_url, time_zone=TZ)
    todo_id = _seed_owner_state(scene)
    r1 = run_completed(
        scene,
        _utc(20, 12),
        cost=100_000,
        executed=[action("send_reminder", "booking"), action("send_reminder", "booking")],
    )
    r2 = run_completed(
        scene,
        _utc(21, 2, 30),  # 23:30 on the 20th in São Paulo
        cost=50_000,
        executed=[action("send_reminder", "booking"), action("create_lead", "crm")],
    )
    yesterday = run_completed(
        scene, _utc(20, 2), cost=70_000, reply=False, status=RunStatus.FAILED
    )  # 23:00 on the 19th
    dry = run_completed(scene, _utc(20, 15), cost=999_000, executed=[action("send_reminder", "booking")], dry_run=True)
    handed = run_completed(scene, _utc(20, 16), cost=30_000, reply=False, status=RunStatus.HANDOFF)
    proposal = action("refund_order", "sales", summary="Refund order 42")
    cold_old = insight(scene, "crm:cold-leads", DAY, _utc(20, 9), title="3 leads went cold", body="old")
    cold = insight(scene, "crm:cold-leads", DAY, _utc(20, 18), title="4 leads went cold", body="No answer for 7 days.")
    proposed = insight(
        scene,
        f"proposal:{proposal.action_id}",
        DAY,
        _utc(20, 13),
        kind="proposed_action",
        area="sales",
        title="Refund order 42?",
        body="The customer was charged twice.",
        proposed_action=proposal,
    )
    serde = Serde.from_settings(topics)
    async with RecordProducer(topics, service="test", serde=serde) as producer:
        for record in (r1, r2, yesterday, dry, handed, r1):  # r1 twice: a redelivery
            await producer.send(Topics.RUN_COMPLETED, record)
        await producer.send(Topics.HANDOFF_TRIGGERED, handoff(scene, handed))
        for record in (cold, proposed, cold_old):  # the older record of a key arrives last and loses
            await producer.send(Topics.INSIGHTS, record)
    expected = _expected(scene, todo_id, proposal, cold.insight_id)

    def settled() -> bool:
        return stored_digest(scene, DAY) == expected

    async with running_brief(stack.database_url, topics, group_id):
        await wait_for(settled, what="the digest of the day")
    previous = stored_digest(scene, date(2026, 11, 19))
    assert previous is not None and previous["pulse"]["runs"] == 1 and previous["pulse"]["spend_micros"] == 70_000

    # Replay: forget everything the brief derived, then read the topics again from the start.
    with tenant_session(scene.org) as session:
        session.execute(delete(BriefFact).where(BriefFact.org_id == scene.org_id))
        session.execute(delete(WorkspaceDailyBrief).where(WorkspaceDailyBrief.org_id == scene.org_id))
    async with running_brief(stack.database_url, topics, f"{group_id}-replay"):
        await wait_for(settled, what="the replayed digest")
    assert stored_digest(scene, date(2026, 11, 19)) == previous


async def test_a_dismissed_promote_suggestion_leaves_the_home_for_good(
    stack: StackEndpoints, migrated: None, topics: KafkaSettings, group_id: str
) -> None:
    """The owner dismisses the 3-approval suggestion through the API's service: the ``insights``
    record it queues (relayed here by hand) recomposes the digest without the promote card, and a
    later run of the day does not bring it back."""
    scene = make_scene(stack.database_url, time_zone=TZ)
    _seed_owner_state(scene)
    serde = Serde.from_settings(topics)

    def promote_cards() -> list[dict[str, Any]] | None:
        digest = stored_digest(scene, DAY)
        return None if digest is None else [item for item in digest["todo"] if item["kind"] == "promote"]

    async with (
        running_brief(stack.database_url, topics, group_id),
        RecordProducer(topics, service="test", serde=serde) as producer,
    ):
        await producer.send(Topics.RUN_COMPLETED, run_completed(scene, _utc(20, 12), cost=10_000))
        await wait_for(lambda: promote_cards(), what="the promote card")
        with tenant_session(scene.org) as session:
            decide_promotion(session, serde, scene.org_id, "booking", "send_reminder", False, None, "req-dismiss")
            payloads = session.scalars(
                select(OutboxEvent.payload).where(
                    OutboxEvent.topic == Topics.INSIGHTS.name, OutboxEvent.key == str(scene.org_id).encode()
                )
            ).all()
        assert len(payloads) == 1, "the dismissal is announced to the brief"
        dismissal: Insight = serde.decode(Topics.INSIGHTS, payloads[0])  # type: ignore[assignment]
        await producer.send(Topics.INSIGHTS, dismissal)
        # The record recomposes the digest of its own day (the org's today) without the card...
        today = dismissal.insight_date

        def today_without_promote() -> bool:
            digest = stored_digest(scene, today)
            return digest is not None and not [item for item in digest["todo"] if item["kind"] == "promote"]

        await wait_for(today_without_promote, what="today's digest without the promote card")
        # ...and no later recomposition brings it back.
        await producer.send(Topics.RUN_COMPLETED, run_completed(scene, _utc(20, 14), cost=10_000))
        await wait_for(lambda: (stored_digest(scene, DAY) or {}).get("pulse", {}).get("runs") == 2, what="run two")
    assert promote_cards() == []


def test_an_answered_promote_suggestion_is_dated_the_orgs_day_not_the_servers(
    stack: StackEndpoints, migrated: None, topics: KafkaSettings
) -> None:
    """Its record recomposes the digest of the day it names: the org's today. Dated by the
    database's CURRENT_DATE (the server's, UTC), west of UTC in the evening it named the org's
    tomorrow, and the answered card stayed on today's Home. A zone where the local date is not
    the UTC one at this very hour makes the difference visible whenever the test runs."""
    zone = "Etc/GMT+12" if datetime.now(UTC).hour < 12 else "Etc/GMT-14"
    scene = make_scene(stack.database_url, time_zone=zone)
    serde = Serde.from_settings(topics)
    with tenant_session(scene.org) as session:
        decide_promotion(session, serde, scene.org_id, "booking", "send_reminder", False, None, "req-dismiss")
        dated = session.scalar(
            select(WorkspaceInsight.insight_date).where(WorkspaceInsight.dedupe_key == "promote:booking:send_reminder")
        )
    local_today = datetime.now(ZoneInfo(zone)).date()
    assert dated == local_today != datetime.now(UTC).date()


async def test_a_promote_row_is_answered_where_it_changes_the_mode(
    stack: StackEndpoints, migrated: None, topics: KafkaSettings
) -> None:
    """Marking the promote row actioned through /insights would close the suggestion and change no
    mode: refused (409), the owner answers it under /autonomy/{area}/promotions."""
    scene = make_scene(stack.database_url, time_zone=TZ)
    serde = Serde.from_settings(topics)
    with tenant_session(scene.org) as session:
        row_id = _promotion_row(session, scene.org_id, "booking", "send_reminder", 3)
    with tenant_session(scene.org) as session, pytest.raises(InsightDecidedByPromotion):
        mark_actioned(session, serde, scene.org_id, row_id, None, None, "req-action")


async def test_a_reply_the_channel_refused_is_counted_as_not_delivered(
    stack: StackEndpoints, migrated: None, topics: KafkaSettings, group_id: str
) -> None:
    """``completed`` alone never claims the reply reached the customer: a reply whose delivery
    failed is "not delivered" in the pulse, not one more reply. A reply withheld because people
    took the conversation over is neither: nothing failed, it was held back on purpose."""
    scene = make_scene(stack.database_url, time_zone=TZ)
    serde = Serde.from_settings(topics)
    refused = run_completed(scene, _utc(20, 12), cost=10_000)
    withheld = run_completed(scene, _utc(20, 12), cost=10_000)
    with tenant_session(scene.org) as session:
        for run, error_code in ((refused, "http_400"), (withheld, WITH_HUMANS)):
            session.add(
                AiAgentRun(
                    id=run.run_id,
                    org_id=scene.org_id,
                    agent_id=scene.agent_id,
                    agent_version_id=scene.version_id,
                    conversation_id=scene.conversation_id,
                    status="completed",
                )
            )
            session.flush()
            message = Message(
                org_id=scene.org_id,
                conversation_id=scene.conversation_id,
                channel_session_id=scene.channel_session_id,
                direction="outbound",
                sender="agent",
                body="See you at 10!",
                run_id=run.run_id,
            )
            session.add(message)
            session.flush()
            session.add(
                RunDelivery(
                    org_id=scene.org_id,
                    run_id=run.run_id,
                    message_id=message.id,
                    kind="reply",
                    channel="waha",
                    status="failed",
                    error_code=error_code,
                )
            )
    async with (
        running_brief(stack.database_url, topics, group_id),
        RecordProducer(topics, service="test", serde=serde) as producer,
    ):
        await producer.send(Topics.RUN_COMPLETED, refused)
        await producer.send(Topics.RUN_COMPLETED, withheld)
        await producer.send(Topics.RUN_COMPLETED, run_completed(scene, _utc(20, 13), cost=10_000))
        await wait_for(lambda: (stored_digest(scene, DAY) or {}).get("pulse", {}).get("runs") == 3, what="the runs")
    pulse = (stored_digest(scene, DAY) or {})["pulse"]
    assert (pulse["replies"], pulse["undelivered"]) == (1, 1)
    assert pulse["text"].startswith("3 runs · 1 reply (1 not delivered) · ")


def _handed_back(scene: Scene, waiting: tuple[uuid.UUID, ...], *, cost: int) -> RunCompleted:
    """A run its runner handed back at a shutdown (13:00 on the day), with what it spent."""
    return run_completed(scene, _utc(20, 13), cost=cost, reply=False, status=RunStatus.FAILED).model_copy(
        update={
            "message_ids": waiting,
            "error_family": ErrorFamily.PROCESS_LOST,
            "error_code": "runner_shutdown",
            "vitality": Vitality.DEAD,
        }
    )


async def test_a_customer_left_unanswered_shows_on_the_pulse_and_a_handed_back_run_is_only_spend(
    stack: StackEndpoints, migrated: None, topics: KafkaSettings, group_id: str
) -> None:
    """A run that failed with its customer waiting is "left unanswered"; a run its runner handed back
    at a shutdown is not a run of the day (its recovery is), but what it spent is spend."""
    scene = make_scene(stack.database_url, time_zone=TZ)
    serde = Serde.from_settings(topics)
    waiting = (uuid.uuid4(),)
    failed = run_completed(scene, _utc(20, 12), cost=10_000, reply=False, status=RunStatus.FAILED).model_copy(
        update={"message_ids": waiting, "error_family": ErrorFamily.TRANSIENT_UPSTREAM, "vitality": Vitality.FAILED}
    )
    handed_back = _handed_back(scene, waiting, cost=3_000)
    recovered = run_completed(scene, _utc(20, 13), cost=20_000).model_copy(update={"message_ids": waiting})
    async with (
        running_brief(stack.database_url, topics, group_id),
        RecordProducer(topics, service="test", serde=serde) as producer,
    ):
        for record in (failed, handed_back, recovered):
            await producer.send(Topics.RUN_COMPLETED, record)
        await wait_for(
            lambda: (stored_digest(scene, DAY) or {}).get("pulse", {}).get("spend_micros") == 33_000,
            what="all three runs",
        )
    pulse = (stored_digest(scene, DAY) or {})["pulse"]
    assert (pulse["runs"], pulse["replies"], pulse["unanswered"]) == (2, 1, 1)
    assert pulse["text"].startswith("2 runs · 1 reply · 1 left unanswered · 0 handoffs · spend $0.03")


async def test_a_handed_back_last_attempt_closed_by_the_dispatcher_keeps_what_it_spent(
    stack: StackEndpoints, migrated: None, topics: KafkaSettings, group_id: str
) -> None:
    """The last attempt is handed back at a shutdown (its real usage), then the dispatcher closes
    the same run id as lost with a newer, zero-usage record: the run now counts, and is left
    unanswered, but what it spent stays in the day's spend, whatever order the records come in."""
    scene = make_scene(stack.database_url, time_zone=TZ)
    serde = Serde.from_settings(topics)
    waiting = (uuid.uuid4(),)
    handed_back = _handed_back(scene, waiting, cost=3_000).model_copy(update={"tokens_in": 1_200, "tokens_out": 80})
    closed_as_lost = handed_back.model_copy(
        update={
            "completed_at": _utc(20, 13, 2),
            "error_code": "lease_expired",
            "cost_micro_usd": 0,
            "tokens_in": 0,
            "tokens_out": 0,
        }
    )
    # A second run whose records arrive the other way round: the dispatcher's close first.
    other_waiting = (uuid.uuid4(),)
    slow = handed_back.model_copy(
        update={"run_id": uuid.uuid4(), "message_ids": other_waiting, "cost_micro_usd": 5_000}
    )
    slow_closed = slow.model_copy(
        update={"completed_at": _utc(20, 14), "error_code": "lease_expired", "cost_micro_usd": 0}
    )

    def pulse() -> dict[str, Any]:
        return (stored_digest(scene, DAY) or {}).get("pulse", {})

    async with (
        running_brief(stack.database_url, topics, group_id),
        RecordProducer(topics, service="test", serde=serde) as producer,
    ):
        await producer.send(Topics.RUN_COMPLETED, handed_back)
        await wait_for(lambda: pulse().get("spend_micros") == 3_000, what="the handed-back attempt")
        assert pulse()["runs"] == 0
        await producer.send(Topics.RUN_COMPLETED, closed_as_lost)
        await wait_for(lambda: pulse().get("runs") == 1, what="the dispatcher's close")
        assert (pulse()["spend_micros"], pulse()["unanswered"]) == (3_000, 1)

        await producer.send(Topics.RUN_COMPLETED, slow_closed)
        await wait_for(lambda: pulse().get("runs") == 2, what="the second run's close")
        await producer.send(Topics.RUN_COMPLETED, slow)
        await wait_for(lambda: pulse().get("spend_micros") == 8_000, what="the second run's spend")
    final = pulse()
    assert (final["runs"], final["unanswered"]) == (2, 2)  # the newer record's outcome stays
    with tenant_session(scene.org) as session:
        payload = session.scalars(
            select(BriefFact.payload).where(
                BriefFact.org_id == scene.org_id, BriefFact.fact_key == str(handed_back.run_id)
            )
        ).one()
    assert (payload["tokens_in"], payload["tokens_out"], payload["handed_back"]) == (1_200, 80, False)


def test_the_days_totals_join_the_refused_replies_once_not_once_per_run(stack: StackEndpoints) -> None:
    """The pulse is recounted on every batch. A per-run lookup of refused replies, planned while
    ``run_deliveries`` looked empty, scanned it once per run (90 ms a batch at 660 runs, growing with
    the square of the day's runs): the plan must read the refused replies once, whatever it guesses."""
    from sqlalchemy import text

    from services.brief.store import _RUN_TOTALS
    from tests.support.api import create_org

    org = create_org(stack.database_url, name="Plan Org")
    # Both ways the planner may read a young table: sequentially, or through an index.
    for seqscan in ("on", "off"):
        with tenant_session(org) as session:
            session.execute(text("SELECT set_config('enable_seqscan', :on, true)"), {"on": seqscan})
            (plan,) = session.execute(
                text(f"EXPLAIN (FORMAT JSON) {_RUN_TOTALS.text}"),
                {"org_id": org.org_id, "day": date.today(), "kind": "run"},
            ).scalar_one()
        nodes = list(_plan_nodes(plan["Plan"]))
        assert not [node for node in nodes if node.get("Parent Relationship") == "SubPlan"], plan
        # Counted on the plan's nodes, not its text: an index scan names its index too.
        assert [node.get("Relation Name") for node in nodes].count("run_deliveries") == 1, plan


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every node of an ``EXPLAIN (FORMAT JSON)`` plan, depth first."""
    yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child)


def test_an_action_type_already_auto_by_its_own_mode_gets_no_promote_card(stack: StackEndpoints) -> None:
    """Promotion is per action type: one made ``auto`` on its own (its area still proposing) is
    not suggested again; another action type of the same area still is."""
    from services.brief.store import promotions
    from switchboard.db.models.autonomy import WorkspaceActionAutonomy
    from tests.support.api import create_org

    org = create_org(stack.database_url, name="Promote Org")
    with tenant_session(org) as session:
        for action_type in ("crm_send_whatsapp_message", "crm_schedule_followup"):
            for _ in range(3):
                session.add(
                    AgentDecision(
                        org_id=org.org_id,
                        area="crm",
                        action_type=action_type,
                        proposed_action={"to": "x"},
                        autonomy_tier="propose",
                        status="approved",
                        decided_at=_utc(19, 10),
                    )
                )
        session.add(WorkspaceActionAutonomy(org_id=org.org_id, action_type="crm_send_whatsapp_message", mode="auto"))
    with tenant_session(org) as session:
        found = promotions(session, org.org_id, threshold=3)
    assert [(p.area, p.action_type, p.approvals) for p in found] == [("crm", "crm_schedule_followup", 3)]


@pytest.mark.parametrize("stopped_by", ["org_kill_switch", "area_kill_switch", "area_off"])
def test_no_promote_card_while_autonomy_is_stopped(stack: StackEndpoints, stopped_by: str) -> None:
    """The runner treats a kill switch (the org's or the area's) and an area turned off as ``off``
    whatever the action type's mode: a card asking to make it ``auto`` then would change nothing
    the owner can see (the API's own suggestion is not made then either)."""
    from services.brief.store import promotions
    from switchboard.db.models import Organization
    from switchboard.db.models.autonomy import WorkspaceAutonomy
    from tests.support.api import create_org

    org = create_org(stack.database_url, name="Stopped Org")
    with tenant_session(org) as session:
        for _ in range(3):
            session.add(
                AgentDecision(
                    org_id=org.org_id,
                    area="crm",
                    action_type="crm_schedule_followup",
                    proposed_action={"to": "x"},
                    autonomy_tier="propose",
                    status="approved",
                    decided_at=_utc(19, 10),
                )
            )
    with tenant_session(org) as session:
        assert [p.action_type for p in promotions(session, org.org_id, threshold=3)] == ["crm_schedule_followup"]
        if stopped_by == "org_kill_switch":
            session.get_one(Organization, org.org_id).autonomy_kill_switch = True
        else:
            killed = stopped_by == "area_kill_switch"
            session.add(
                WorkspaceAutonomy(
                    org_id=org.org_id, area="crm", mode="propose" if killed else "off", kill_switch=killed
                )
            )
    with tenant_session(org) as session:
        assert promotions(session, org.org_id, threshold=3) == []
