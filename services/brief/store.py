"""All SQL of the brief: facts in, day inputs out, the digest row written.

Every function runs in the caller's org-scoped transaction (``tenant_transaction``);
queries also filter by ``org_id``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import date, timedelta
from typing import Any, Final

from sqlalchemy import BigInteger, and_, bindparam, func, literal_column, select, text, tuple_
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.dialects.postgresql import UUID as PG_UUID
from sqlalchemy.orm import Session

from services.brief.catalog import DigestCatalog
from services.brief.digest import DayInputs, InsightFact, Promotion, RetiredModelUse, RunFact, RunTotals, compose
from services.brief.facts import SPEND_FIELDS, Fact, merged
from switchboard.autonomy import load_settings, promotion_key
from switchboard.db.daily_brief import lock_day, open_todo_items
from switchboard.db.enums import AutonomyMode, DecisionStatus, InsightStatus
from switchboard.db.models.agents import AiAgent, AiAgentVersion, AiModel
from switchboard.db.models.autonomy import (
    AgentDecision,
    WorkspaceDailyBrief,
    WorkspaceHomePrefs,
    WorkspaceInsight,
)
from switchboard.db.models.brief import BriefFact, BriefFactKind
from switchboard.run_outcomes import WITH_HUMANS

# How far back an undecided proposal or an open insight is carried into a day's to-do list.
# Older ones are still listed by the API (/decisions?status=proposed, /insights?status=new);
# the window bounds what every composition reads.
CARRY_OVER_DAYS: Final = 30


# On a key already stored, the newer record (``occurred_at``) gives day, time and payload, and a
# run keeps the larger spend of the two (facts.merged is the same rule within a batch).
_NEWER = "brief_facts.occurred_at <= excluded.occurred_at"
_SPEND = ", ".join(
    f"'{name}', GREATEST((brief_facts.payload ->> '{name}')::bigint, (excluded.payload ->> '{name}')::bigint)"
    for name in SPEND_FIELDS
)
_MERGED_PAYLOAD = (
    f"CASE WHEN {_NEWER} THEN excluded.payload ELSE brief_facts.payload END"
    f" || CASE WHEN brief_facts.kind = 'run' THEN jsonb_strip_nulls(jsonb_build_object({_SPEND}))"
    " ELSE '{}'::jsonb END"
)


def upsert_facts(session: Session, org_id: uuid.UUID, facts: Sequence[Fact]) -> set[date]:
    """Write the facts and return every day whose digest changed.

    The newest record of a key wins, except that a run keeps the larger spend of its records:
    the dispatcher's zero-usage close of a handed-back or silent last attempt is newer than the
    runner's record of what the attempt spent. An insight re-dated by its producer moves to
    another day: its old day is returned too.
    """
    if not facts:
        return set()
    latest: dict[tuple[str, str], Fact] = {}
    for fact in facts:
        key = (fact.kind.value, fact.key)
        current = latest.get(key)
        latest[key] = fact if current is None else merged(current, fact)
    keys = list(latest)
    previous_days = set(
        session.scalars(
            select(BriefFact.day).where(
                BriefFact.org_id == org_id, tuple_(BriefFact.kind, BriefFact.fact_key).in_(keys)
            )
        )
    )
    stmt = insert(BriefFact).values(
        [
            {
                "org_id": org_id,
                "kind": fact.kind.value,
                "fact_key": fact.key,
                "day": fact.day,
                "occurred_at": fact.occurred_at,
                "payload": fact.payload,
            }
            for fact in latest.values()
        ]
    )
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=[BriefFact.org_id, BriefFact.kind, BriefFact.fact_key],
            set_={
                "day": literal_column(f"CASE WHEN {_NEWER} THEN excluded.day ELSE brief_facts.day END"),
                "occurred_at": func.greatest(BriefFact.occurred_at, stmt.excluded.occurred_at),
                "payload": literal_column(_MERGED_PAYLOAD, type_=JSONB),
                "updated_at": func.now(),
            },
        )
    )
    return previous_days | {fact.day for fact in latest.values()}


def _facts(session: Session, org_id: uuid.UUID, day: date, kind: BriefFactKind) -> list[dict[str, Any]]:
    return list(
        session.scalars(
            select(BriefFact.payload)
            .where(BriefFact.org_id == org_id, BriefFact.day == day, BriefFact.kind == kind.value)
            .order_by(BriefFact.fact_key)
        )
    )


# A reply whose delivery the channel refused (``run_deliveries`` kind reply, status failed) is
# counted apart; sending, sent and unknown (may have reached the customer) count as replies.
# A run handed back at a shutdown is spend but not a run (its recovery is); facts stored before
# the flags existed read as neither handed back nor unanswered.
# The refused replies are one set joined to the day's facts, not a lookup per fact: this runs on
# every batch, and with the per-fact EXISTS a plan made while ``run_deliveries`` looked empty (a
# young database, statistics not yet gathered) scanned the table once per fact — 90 ms a batch
# at 660 runs in the end-to-end benchmark (2026-12-04), growing with the square of the day's runs.
# A reply is claimed when its run ends, so its row is no older than the day before the run's.
# A reply withheld because people took the conversation over (``conversation_with_humans``) is
# neither a reply nor "not delivered": nothing failed, the notifier held it back on purpose.
_RUN_TOTALS = text(
    f"""
    WITH refused AS (
        SELECT d.run_id, bool_and(d.error_code IS NOT DISTINCT FROM '{WITH_HUMANS}') AS withheld
        FROM run_deliveries AS d
        WHERE d.org_id = :org_id AND d.created_at >= CAST(:day AS date) - 1
          AND d.kind = 'reply' AND d.status = 'failed'
        GROUP BY d.run_id
    )
    SELECT count(*) FILTER (WHERE NOT t.handed_back) AS runs,
           count(*) FILTER (WHERE t.replied AND NOT t.failed) AS replies,
           count(*) FILTER (WHERE t.replied AND t.failed AND NOT t.withheld) AS undelivered,
           count(*) FILTER (WHERE t.unanswered) AS unanswered,
           coalesce(sum(t.cost), 0) AS spend
    FROM (
        SELECT (f.payload ->> 'replied')::boolean AS replied,
               (f.payload ->> 'cost_micros')::bigint AS cost,
               coalesce((f.payload ->> 'handed_back')::boolean, false) AS handed_back,
               coalesce((f.payload ->> 'unanswered')::boolean, false) AS unanswered,
               refused.run_id IS NOT NULL AS failed,
               coalesce(refused.withheld, false) AS withheld
        FROM brief_facts AS f
        LEFT JOIN refused ON refused.run_id = (f.payload ->> 'run_id')::uuid
        WHERE f.org_id = :org_id AND f.day = :day AND f.kind = :kind
    ) AS t
    """
).bindparams(bindparam("org_id", type_=PG_UUID(as_uuid=True)))
_RUNS_WITH_ACTIONS = text(
    """
    SELECT f.payload FROM brief_facts AS f
    WHERE f.org_id = :org_id AND f.day = :day AND f.kind = :kind
      AND (jsonb_array_length(coalesce(f.payload -> 'executed', '[]')) > 0
           OR jsonb_array_length(coalesce(f.payload -> 'proposed', '[]')) > 0)
    ORDER BY f.fact_key
    """
).bindparams(bindparam("org_id", type_=PG_UUID(as_uuid=True)))


# The predicate is the partial index's (revision 0025), kind written as a literal: a bound
# parameter would hide it from a generic plan.
_EARLIER_PROPOSING_RUNS = text(
    """
    SELECT f.payload FROM brief_facts AS f
    WHERE f.org_id = :org_id AND f.day >= :since AND f.day < :day
      AND f.kind = 'run' AND jsonb_array_length(COALESCE(f.payload -> 'proposed', '[]'::jsonb)) > 0
    ORDER BY f.day, f.fact_key
    """
).bindparams(bindparam("org_id", type_=PG_UUID(as_uuid=True)))
_EARLIER_INSIGHTS = text(
    """
    SELECT f.payload FROM brief_facts AS f
    WHERE f.org_id = :org_id AND f.day >= :since AND f.day < :day AND f.kind = 'insight'
    ORDER BY f.fact_key
    """
).bindparams(bindparam("org_id", type_=PG_UUID(as_uuid=True)))


def _spend(session: Session, org_id: uuid.UUID, day: date) -> int:
    total = session.scalar(
        select(func.coalesce(func.sum(BriefFact.payload["cost_micros"].astext.cast(BigInteger)), 0)).where(
            BriefFact.org_id == org_id, BriefFact.day == day, BriefFact.kind == BriefFactKind.RUN.value
        )
    )
    return int(total or 0)


def _handoffs(session: Session, org_id: uuid.UUID, day: date) -> int:
    return int(
        session.scalar(
            select(func.count()).where(
                BriefFact.org_id == org_id, BriefFact.day == day, BriefFact.kind == BriefFactKind.HANDOFF.value
            )
        )
        or 0
    )


def _insight_status(session: Session, org_id: uuid.UUID, keys: Iterable[str]) -> dict[str, str]:
    keys = list(keys)
    if not keys:
        return {}
    rows = session.execute(
        select(WorkspaceInsight.dedupe_key, WorkspaceInsight.status).where(
            WorkspaceInsight.org_id == org_id, WorkspaceInsight.dedupe_key.in_(keys)
        )
    )
    return {key: status for key, status in rows}


def _decided(session: Session, org_id: uuid.UUID, action_ids: Iterable[str]) -> frozenset[str]:
    ids = [uuid.UUID(a) for a in set(action_ids)]
    if not ids:
        return frozenset()
    rows = session.scalars(
        select(AgentDecision.id).where(
            AgentDecision.org_id == org_id,
            AgentDecision.id.in_(ids),
            AgentDecision.status != DecisionStatus.PROPOSED.value,
        )
    )
    return frozenset(str(r) for r in rows)


def promotions(session: Session, org_id: uuid.UUID, threshold: int) -> list[Promotion]:
    """Action types the owner approved ``threshold`` times that still propose — by the same policy
    the runner gates with (``AutonomySettings.action_mode``: not ``auto`` by their own mode or their
    area's, and not off: a kill switch or an area turned off suggests nothing, since accepting would
    change nothing the owner can see) — minus the suggestions the owner already answered."""
    approvals = func.count().label("approvals")
    query = (
        select(AgentDecision.area, AgentDecision.action_type, approvals)
        .where(
            AgentDecision.org_id == org_id,
            AgentDecision.decided_at.is_not(None),
            AgentDecision.status.in_([DecisionStatus.APPROVED.value, DecisionStatus.EXECUTED.value]),
        )
        .group_by(AgentDecision.area, AgentDecision.action_type)
        .having(func.count() >= threshold)
    )
    rows = session.execute(query).all()
    if not rows:
        return []
    settings = load_settings(session, org_id)
    found = [
        Promotion(area=a, action_type=t, approvals=int(n))
        for a, t, n in rows
        if settings.action_mode(a, t) is AutonomyMode.PROPOSE
    ]
    # The owner's answer (accepted or dismissed) is kept on the suggestion's row: never asked again.
    answered = {
        key
        for key, status in _insight_status(
            session, org_id, (promotion_key(p.area, p.action_type) for p in found)
        ).items()
        if status in {InsightStatus.DISMISSED.value, InsightStatus.ACTIONED.value}
    }
    return [p for p in found if promotion_key(p.area, p.action_type) not in answered]


def _run_totals(session: Session, org_id: uuid.UUID, day: date) -> RunTotals:
    """Runs, replies and spend of the day, counted in SQL: a busy day has thousands of run facts, and
    parsing them all on every batch made the digest cost grow with the day (docs/brief.md)."""
    row = session.execute(_RUN_TOTALS, {"org_id": org_id, "day": day, "kind": BriefFactKind.RUN.value}).one()
    return RunTotals(
        runs=int(row.runs),
        replies=int(row.replies),
        spend_micros=int(row.spend),
        undelivered=int(row.undelivered),
        unanswered=int(row.unanswered),
    )


def _runs_with_actions(session: Session, org_id: uuid.UUID, day: date) -> list[dict[str, Any]]:
    """The day's run facts that executed or proposed an action: the only ones the sections list."""
    return [
        row.payload
        for row in session.execute(_RUNS_WITH_ACTIONS, {"org_id": org_id, "day": day, "kind": BriefFactKind.RUN.value})
    ]


def _earlier_insights(session: Session, org_id: uuid.UUID, day: date) -> list[dict[str, Any]]:
    """Insight facts of the ``CARRY_OVER_DAYS`` before ``day`` (the owner's status filters them later)."""
    rows = session.execute(
        _EARLIER_INSIGHTS, {"org_id": org_id, "since": day - timedelta(days=CARRY_OVER_DAYS), "day": day}
    )
    return [row.payload for row in rows]


def _earlier_proposing_runs(session: Session, org_id: uuid.UUID, day: date) -> list[dict[str, Any]]:
    """Run facts of the ``CARRY_OVER_DAYS`` before ``day`` that proposed an action."""
    rows = session.execute(
        _EARLIER_PROPOSING_RUNS,
        {"org_id": org_id, "since": day - timedelta(days=CARRY_OVER_DAYS), "day": day},
    )
    return [row.payload for row in rows]


def retired_model_uses(session: Session, org_id: uuid.UUID) -> list[RetiredModelUse]:
    """The org's published, unarchived agents whose published version's model the catalog retired."""
    rows = session.execute(
        select(AiAgent.id, AiAgent.name, AiAgentVersion.provider, AiAgentVersion.model, AiModel.deprecated_at)
        .join(AiAgentVersion, AiAgentVersion.id == AiAgent.published_version_id)
        .join(AiModel, and_(AiModel.provider == AiAgentVersion.provider, AiModel.model == AiAgentVersion.model))
        .where(AiAgent.org_id == org_id, AiAgent.archived_at.is_(None), AiModel.deprecated_at.is_not(None))
    )
    return [RetiredModelUse(str(r.id), r.name, r.provider, r.model, r.deprecated_at.date()) for r in rows]


def load_inputs(session: Session, org_id: uuid.UUID, day: date, time_zone: str, catalog: DigestCatalog) -> DayInputs:
    runs = [RunFact.from_payload(p) for p in _runs_with_actions(session, org_id, day)]
    insights = [InsightFact.from_payload(p) for p in _facts(session, org_id, day, BriefFactKind.INSIGHT)]
    earlier_runs = [RunFact.from_payload(p) for p in _earlier_proposing_runs(session, org_id, day)]
    earlier_insights = [InsightFact.from_payload(p) for p in _earlier_insights(session, org_id, day)]
    action_ids = [a.action_id for r in (*runs, *earlier_runs) for a in r.proposed]
    action_ids += [i.proposed_action.action_id for i in (*insights, *earlier_insights) if i.proposed_action is not None]
    prefs = session.scalars(select(WorkspaceHomePrefs).where(WorkspaceHomePrefs.org_id == org_id)).one_or_none()
    return DayInputs(
        day=day,
        time_zone=time_zone,
        runs=runs,
        totals=_run_totals(session, org_id, day),
        handoffs=_handoffs(session, org_id, day),
        spend_yesterday_micros=_spend(session, org_id, day - timedelta(days=1)),
        insights=insights,
        earlier_insights=earlier_insights,
        earlier_runs=earlier_runs,
        insight_status=_insight_status(session, org_id, (i.insight_key for i in (*insights, *earlier_insights))),
        decided_actions=_decided(session, org_id, action_ids),
        promotions=promotions(session, org_id, catalog.promote_after_approvals),
        todos=open_todo_items(session, org_id),
        retired_models=retired_model_uses(session, org_id),
        pinned_sections=tuple(prefs.pinned_sections) if prefs else (),
        pinned_areas=tuple(prefs.pinned_areas) if prefs else (),
    )


def _has_digest(session: Session, org_id: uuid.UUID, day: date) -> bool:
    found = session.scalar(
        select(WorkspaceDailyBrief.day).where(WorkspaceDailyBrief.org_id == org_id, WorkspaceDailyBrief.day == day)
    )
    return found is not None


def write_digest(session: Session, org_id: uuid.UUID, day: date, digest: dict[str, Any]) -> None:
    stmt = insert(WorkspaceDailyBrief).values(org_id=org_id, day=day, digest=digest)
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=[WorkspaceDailyBrief.org_id, WorkspaceDailyBrief.day],
            set_={"digest": stmt.excluded.digest, "updated_at": func.now()},
            where=WorkspaceDailyBrief.digest.is_distinct_from(stmt.excluded.digest),
        )
    )


def recompute(
    session: Session,
    org_id: uuid.UUID,
    days: Iterable[date],
    time_zone: str,
    catalog: DigestCatalog,
    today: date | None = None,
) -> list[date]:
    """Recompose and store the digests of ``days`` — and of each next day already stored, whose
    pulse compares with its yesterday, and of ``today`` (the org's) when a touched day is within
    its carry-over window: today's to-do lists what still waits from those days. Days are locked
    in order (no deadlock between replicas)."""
    touched = set(days)
    touched |= {d + timedelta(days=1) for d in touched if _has_digest(session, org_id, d + timedelta(days=1))}
    if today is not None and any(today - timedelta(days=CARRY_OVER_DAYS) <= d < today for d in touched):
        touched.add(today)
    ordered = sorted(touched)
    for day in ordered:
        lock_day(session, org_id, day)
    for day in ordered:
        write_digest(session, org_id, day, compose(load_inputs(session, org_id, day, time_zone, catalog), catalog))
    return ordered
