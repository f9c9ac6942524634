"""Budgets after the fact, end to end through the real topics: the soft threshold records one
warning, exhaustion one hard incident and pauses the agent (audited as the system, announced
as a ``published`` paused record in the outbox), and reprocessing never duplicates anything."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from switchboard.contracts import Serde, Topics
from switchboard.contracts.enums import PublishedChange
from switchboard.contracts.records import RunCompleted
from switchboard.db.models.agents import AiAgent
from switchboard.db.models.audit import AuditLogEntry
from switchboard.db.models.autonomy import WorkspaceInsight
from switchboard.db.models.brief import BriefFact
from switchboard.db.models.budgets import BudgetIncident, BudgetPolicy
from switchboard.db.models.outbox import OutboxEvent
from switchboard.db.usage import month_start, record_usage
from switchboard.kafka.producer import RecordProducer
from switchboard.settings import KafkaSettings
from tests.integration.brief.scene import Scene, make_scene, run_completed, running_brief, stored_digest, wait_for
from tests.support.agents import tenant_session
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration

# This month: a past month's record pauses nothing (test_a_past_months_record_pauses_nothing_now).
MONTH = month_start(datetime.now(UTC))
AT = datetime(MONTH.year, MONTH.month, 15, 12, tzinfo=UTC)
CAP = 1_000_000  # the agent's own monthly figure: $1.00


def _spend(scene: Scene, cost: int) -> None:
    """What the runner does in its finish transaction (the brief only reads it). Left unfolded on
    purpose: the brief must count the ledger entries a runner has not folded yet."""
    with tenant_session(scene.org) as session:
        record_usage(session, scene.org_id, scene.agent_id, MONTH, 1000, 100, cost)


def _incidents(scene: Scene) -> list[tuple[str, str]]:
    with tenant_session(scene.org) as session:
        rows = session.scalars(select(BudgetIncident).where(BudgetIncident.org_id == scene.org_id))
        return sorted((r.severity, r.action_taken) for r in rows)


def _outbox(scene: Scene, topic: str, key: bytes) -> list[OutboxEvent]:
    with tenant_session(scene.org) as session:
        return list(
            session.scalars(
                select(OutboxEvent).where(OutboxEvent.topic == topic, OutboxEvent.key == key).order_by(OutboxEvent.id)
            )
        )


def _fact_stored(scene: Scene, run: RunCompleted) -> bool:
    with tenant_session(scene.org) as session:
        return session.get(BriefFact, (scene.org_id, "run", str(run.run_id))) is not None


async def test_soft_then_hard_budget_incidents_pause_the_agent_once(
    stack: StackEndpoints, migrated: None, topics: KafkaSettings, group_id: str
) -> None:
    scene = make_scene(stack.database_url, monthly_budget_micros=CAP)
    serde = Serde.from_settings(topics)
    at = AT
    first = run_completed(scene, at, cost=850_000)
    second = run_completed(scene, at.replace(hour=13), cost=200_000)
    third = run_completed(scene, at.replace(hour=14), cost=0)
    async with (
        RecordProducer(topics, service="test", serde=serde) as producer,
        running_brief(stack.database_url, topics, group_id),
    ):
        _spend(scene, 850_000)  # 85 %: past the default 80 % soft threshold
        await producer.send(Topics.RUN_COMPLETED, first)
        await wait_for(lambda: _incidents(scene) == [("warning", "notify")], what="the warning incident")
        with tenant_session(scene.org) as session:
            assert session.get_one(AiAgent, scene.agent_id).published_version_id == scene.version_id

        _spend(scene, 200_000)  # 105 %: exhausted
        await producer.send(Topics.RUN_COMPLETED, first)  # a redelivery of the first run, before the second
        await producer.send(Topics.RUN_COMPLETED, second)
        await wait_for(lambda: len(_incidents(scene)) == 2, what="the hard incident")
        assert _incidents(scene) == [("hard", "pause_agent"), ("warning", "notify")]

        for record in (second, first, third):  # reprocessing: nothing new
            await producer.send(Topics.RUN_COMPLETED, record)
        await wait_for(lambda: _fact_stored(scene, third), what="the last run")
    assert _incidents(scene) == [("hard", "pause_agent"), ("warning", "notify")]

    with tenant_session(scene.org) as session:
        agent = session.get_one(AiAgent, scene.agent_id)
        assert agent.published_version_id is None and agent.paused_at is not None
        assert agent.pause_reason == "budget_exhausted"
        audits = list(
            session.scalars(
                select(AuditLogEntry).where(
                    AuditLogEntry.org_id == scene.org_id, AuditLogEntry.action == "ai_agent.paused_by_budget"
                )
            )
        )
        assert [(a.actor_user_id, a.actor_kind, a.target_id) for a in audits] == [(None, "system", str(scene.agent_id))]
        insights = {
            row.dedupe_key: row.severity
            for row in session.scalars(select(WorkspaceInsight).where(WorkspaceInsight.org_id == scene.org_id))
        }
    key = f"budget_incident:{scene.agent_id}:{MONTH:%Y-%m}"
    assert insights == {f"{key}:warning": "warning", f"{key}:hard": "critical"}

    published = [
        serde.decode(Topics.PUBLISHED, e.payload) for e in _outbox(scene, "published", str(scene.agent_id).encode())
    ]
    assert [(p.change, p.previous_version_id, p.changed_by_user_id) for p in published] == [
        (PublishedChange.PAUSED, scene.version_id, None)
    ]
    announced = [
        serde.decode(Topics.INSIGHTS, e.payload) for e in _outbox(scene, "insights", str(scene.org_id).encode())
    ]
    assert sorted((i.insight_key, i.area, str(i.kind)) for i in announced) == [
        (f"{key}:hard", "cross", "insight"),
        (f"{key}:warning", "cross", "insight"),
    ]

    digest = stored_digest(scene, AT.date())
    assert digest is not None
    listed = [item["insight_key"] for item in digest["todo"] if item["kind"] == "insight"]
    assert sorted(listed) == [f"{key}:hard", f"{key}:warning"]
    cross = next(p for p in digest["planets"] if p["area"] == "cross")
    assert cross["status"] == "attention" and cross["open"] == 2


def _republish(scene: Scene, *, budget: int | None = None) -> None:
    """What publishing again does to the agent row (the brief only reads the pointer)."""
    with tenant_session(scene.org) as session:
        agent = session.get_one(AiAgent, scene.agent_id)
        agent.published_version_id, agent.paused_at, agent.pause_reason = scene.version_id, None, None
        if budget is not None:
            agent.monthly_budget_micros = budget


def _published_pointer(scene: Scene) -> object:
    with tenant_session(scene.org) as session:
        return session.get_one(AiAgent, scene.agent_id).published_version_id


async def test_an_agent_published_again_while_still_over_its_cap_is_paused_again_after_one_run(
    stack: StackEndpoints, migrated: None, topics: KafkaSettings, group_id: str
) -> None:
    """The cap holds for the month: republishing without raising it buys one run, not the rest
    of the month (the incident itself is recorded once); raising the cap resumes for real."""
    scene = make_scene(stack.database_url, monthly_budget_micros=CAP)
    serde = Serde.from_settings(topics)
    at = AT
    async with (
        RecordProducer(topics, service="test", serde=serde) as producer,
        running_brief(stack.database_url, topics, group_id),
    ):
        _spend(scene, 1_100_000)
        await producer.send(Topics.RUN_COMPLETED, run_completed(scene, at, cost=1_100_000))
        await wait_for(lambda: _published_pointer(scene) is None, what="the first pause")

        _republish(scene)
        _spend(scene, 50_000)
        again = run_completed(scene, at.replace(hour=13), cost=50_000)
        await producer.send(Topics.RUN_COMPLETED, again)
        await wait_for(lambda: _published_pointer(scene) is None, what="the second pause")

        _republish(scene, budget=5_000_000)  # the owner raised the cap, then published
        _spend(scene, 50_000)
        resumed = run_completed(scene, at.replace(hour=14), cost=50_000)
        await producer.send(Topics.RUN_COMPLETED, resumed)
        await wait_for(lambda: _fact_stored(scene, resumed), what="the run after raising the cap")
    assert _published_pointer(scene) == scene.version_id, "under the raised cap the agent keeps running"
    assert _incidents(scene) == [("hard", "pause_agent")], "the incident is recorded once"
    with tenant_session(scene.org) as session:
        audits = session.scalars(
            select(AuditLogEntry.details).where(
                AuditLogEntry.org_id == scene.org_id, AuditLogEntry.action == "ai_agent.paused_by_budget"
            )
        ).all()
    assert [bool(d.get("again")) for d in audits] == [False, True]
    announced = [
        serde.decode(Topics.INSIGHTS, e.payload) for e in _outbox(scene, "insights", str(scene.org_id).encode())
    ]
    titles = [i.title for i in announced]  # type: ignore[attr-defined]
    assert titles == [
        "Budget exhausted: Receptionist was paused",
        "Budget still exhausted: Receptionist was paused again",
    ]
    assert "Raise its budget" in announced[1].body  # type: ignore[attr-defined]


def _org_policy(scene: Scene, *, cost: int, soft_pct: int = 80) -> None:
    with tenant_session(scene.org) as session:
        session.add(
            BudgetPolicy(
                org_id=scene.org_id,
                scope="organization",
                cost_limit_micros=cost,
                soft_threshold_pct=soft_pct,
                hard_action="block_dispatch",
            )
        )


async def test_the_orgs_cap_warns_then_records_the_blocked_dispatch_once(
    stack: StackEndpoints, migrated: None, topics: KafkaSettings, group_id: str
) -> None:
    """The dispatcher stops dispatching an org over its cap; the brief is what tells the owner:
    one warning, one hard incident (``block_dispatch``), each an insight the notifier sends on."""
    scene = make_scene(stack.database_url)  # the agent itself is uncapped
    _org_policy(scene, cost=CAP)
    serde = Serde.from_settings(topics)
    at = AT

    def org_incidents() -> list[tuple[str, str, str]]:
        with tenant_session(scene.org) as session:
            rows = session.scalars(
                select(BudgetIncident).where(
                    BudgetIncident.org_id == scene.org_id, BudgetIncident.scope == "organization"
                )
            )
            return sorted((r.severity, r.action_taken, str(r.agent_id)) for r in rows)

    async with (
        RecordProducer(topics, service="test", serde=serde) as producer,
        running_brief(stack.database_url, topics, group_id),
    ):
        _spend(scene, 900_000)
        await producer.send(Topics.RUN_COMPLETED, run_completed(scene, at, cost=900_000))
        await wait_for(lambda: org_incidents() == [("warning", "notify", "None")], what="the org's warning")
        _spend(scene, 150_000)
        for hour in (13, 14):  # the second run past the cap records nothing new
            await producer.send(Topics.RUN_COMPLETED, run_completed(scene, at.replace(hour=hour), cost=150_000))
        expected = [("hard", "block_dispatch", "None"), ("warning", "notify", "None")]
        await wait_for(lambda: org_incidents() == expected, what="the org's hard incident")
        last = run_completed(scene, at.replace(hour=15), cost=0)
        await producer.send(Topics.RUN_COMPLETED, last)
        await wait_for(lambda: _fact_stored(scene, last), what="the last run")
    assert org_incidents() == expected
    with tenant_session(scene.org) as session:
        assert session.get_one(AiAgent, scene.agent_id).published_version_id == scene.version_id, "no agent paused"
    announced = [
        serde.decode(Topics.INSIGHTS, row.payload)
        for row in _outbox(scene, Topics.INSIGHTS.name, str(scene.org_id).encode())
    ]
    keys = sorted(i.insight_key for i in announced)  # type: ignore[attr-defined]
    assert keys == [f"budget_incident:org:{MONTH:%Y-%m}:hard", f"budget_incident:org:{MONTH:%Y-%m}:warning"]
    hard = next(i for i in announced if i.insight_key.endswith(":hard"))  # type: ignore[attr-defined]
    assert "stopped answering" in hard.title and hard.agent_id is None  # type: ignore[attr-defined]


async def test_an_agent_policy_that_only_notifies_does_not_pause_the_agent(
    stack: StackEndpoints, migrated: None, topics: KafkaSettings, group_id: str
) -> None:
    scene = make_scene(stack.database_url)
    with tenant_session(scene.org) as session:
        session.add(
            BudgetPolicy(
                org_id=scene.org_id, scope="agent", agent_id=scene.agent_id, cost_limit_micros=CAP, hard_action="notify"
            )
        )
    serde = Serde.from_settings(topics)
    async with (
        RecordProducer(topics, service="test", serde=serde) as producer,
        running_brief(stack.database_url, topics, group_id),
    ):
        _spend(scene, 1_200_000)
        await producer.send(Topics.RUN_COMPLETED, run_completed(scene, AT, cost=0))
        await wait_for(lambda: _incidents(scene) == [("hard", "notify")], what="the hard incident")
    with tenant_session(scene.org) as session:
        assert session.get_one(AiAgent, scene.agent_id).published_version_id == scene.version_id


async def test_a_past_months_record_pauses_nothing_now(
    stack: StackEndpoints, migrated: None, topics: KafkaSettings, group_id: str
) -> None:
    """A replay (a fresh group id) or a brief that lagged across the month's end reads a run of a
    month that is over: its agent, paused then and republished for the new month, keeps running —
    no pause again, no new incident, no "still exhausted" notice."""
    scene = make_scene(stack.database_url, monthly_budget_micros=CAP)
    serde = Serde.from_settings(topics)
    last_month = month_start(MONTH - timedelta(days=1))
    then = datetime(last_month.year, last_month.month, 20, 12, tzinfo=UTC)
    with tenant_session(scene.org) as session:  # last month: over the cap, recorded and paused then
        record_usage(session, scene.org_id, scene.agent_id, last_month, 1000, 100, 1_200_000)
        session.add(
            BudgetIncident(
                org_id=scene.org_id,
                scope="agent",
                agent_id=scene.agent_id,
                period_month=last_month,
                severity="hard",
                action_taken="pause_agent",
                spent_micros=1_200_000,
                limit_micros=CAP,
            )
        )
    replayed = run_completed(scene, then, cost=0)
    async with (
        RecordProducer(topics, service="test", serde=serde) as producer,
        running_brief(stack.database_url, topics, group_id),
    ):
        await producer.send(Topics.RUN_COMPLETED, replayed)
        await wait_for(lambda: _fact_stored(scene, replayed), what="the replayed run")
    assert _published_pointer(scene) == scene.version_id, "this month's agent keeps answering"
    assert _incidents(scene) == [("hard", "pause_agent")]
    assert _outbox(scene, Topics.INSIGHTS.name, str(scene.org_id).encode()) == []
