"""The brief's batch handler: one org-scoped transaction per org of a consumed batch.

In that transaction, in this order (agent locks before day locks, both in a fixed
order, so brief replicas never deadlock): budgets are evaluated for the batch's
non-dry runs, the records' facts are upserted (budget insights are applied at once,
from the very record the outbox publishes), and every touched day's digest is
recomposed and stored. A crash before commit leaves nothing; the redelivered batch
lands on the same rows (docs/brief.md "Idempotency").
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session

from services.brief import budgets, store
from services.brief.catalog import DigestCatalog
from services.brief.facts import Fact, fact_for, insight_fact
from switchboard.contracts import Serde
from switchboard.contracts.records import Insight, RunCompleted
from switchboard.db.daily_brief import local_day, zone
from switchboard.db.models.tenancy import Organization
from switchboard.db.session import async_tenant_transaction
from switchboard.db.usage import month_start
from switchboard.kafka.consumer import Inbound
from switchboard.observability.logging import get_logger

log = get_logger(__name__)


def process_org(
    session: Session, serde: Serde, catalog: DigestCatalog, org_id: uuid.UUID, records: Sequence[Any]
) -> list[date]:
    """Apply one org's records; returns the days recomposed (empty for an unknown org)."""
    org = session.get(Organization, org_id)
    if org is None:
        log.warning("records of an unknown organization skipped", extra={"org_id": str(org_id)})
        return []
    tz = zone(org.time_zone)
    facts: list[Fact] = []
    # Budgets: once per agent and month, with the batch's last run (the counters hold all of them).
    latest_run: dict[tuple[str, date], RunCompleted] = {}
    for record in records:
        fact = fact_for(record, tz)
        if fact is not None:
            facts.append(fact)
        if isinstance(record, RunCompleted) and not record.dry_run:
            latest_run[(str(record.agent_id), month_start(record.completed_at))] = record
    for _, run in sorted(latest_run.items()):
        insight: Insight | None = budgets.evaluate_run(session, serde, run, tz)
        if insight is not None:
            facts.append(insight_fact(insight))
    # The org's cap: once per month of the batch, with its last run (the counters hold them all).
    latest_of_month = {month: run for (_, month), run in sorted(latest_run.items(), key=lambda i: i[1].completed_at)}
    for _, run in sorted(latest_of_month.items()):
        org_insight = budgets.evaluate_org(session, serde, run, tz)
        if org_insight is not None:
            facts.append(insight_fact(org_insight))
    days = store.upsert_facts(session, org_id, facts)
    return store.recompute(session, org_id, days, tz.key, catalog, today=local_day(datetime.now(UTC), tz))


class BriefHandler:
    """``RecordConsumer`` batch handler over an async session factory."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], serde: Serde, catalog: DigestCatalog) -> None:
        self._sessions = sessions
        self._serde = serde
        self._catalog = catalog

    async def __call__(self, batch: Sequence[Inbound]) -> None:
        by_org: dict[uuid.UUID, list[Any]] = defaultdict(list)
        for inbound in batch:
            by_org[inbound.value.org_id].append(inbound.value)
        for org_id in sorted(by_org, key=str):
            records = by_org[org_id]
            async with self._sessions() as session, async_tenant_transaction(session, org_id):
                await session.run_sync(
                    lambda s, o=org_id, r=records: process_org(s, self._serde, self._catalog, o, r)  # type: ignore[misc]
                )
