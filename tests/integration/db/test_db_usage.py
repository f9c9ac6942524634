"""Atomic usage counters and the insight upsert, against a real PostgreSQL."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import sessionmaker

from switchboard.db.enums import InsightStatus
from switchboard.db.insights import upsert_insight
from switchboard.db.models import AgentUsageMonthly, WorkspaceInsight, WorkspaceTokenUsage
from switchboard.db.session import tenant_transaction
from switchboard.db.usage import add_agent_usage, add_token_usage

from .conftest import MigratedDatabase
from .factories import create_agent

pytestmark = pytest.mark.integration

THREADS = 20
INCREMENTS_PER_THREAD = 5


def test_add_token_usage_is_atomic_under_concurrency(db: MigratedDatabase, org_a: uuid.UUID) -> None:
    engine = db.engine(pool_size=THREADS, max_overflow=0)
    sessions = sessionmaker(engine)
    month = date(2026, 3, 1)
    start = threading.Barrier(THREADS)

    def worker(_: int) -> None:
        start.wait()  # all threads hit the (not yet existing) row at once
        for _ in range(INCREMENTS_PER_THREAD):
            with sessions() as session, tenant_transaction(session, org_a):
                add_token_usage(session, org_a, month, 100, 50, 7)

    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        list(pool.map(worker, range(THREADS)))

    n = THREADS * INCREMENTS_PER_THREAD
    with db.app_session() as session, tenant_transaction(session, org_a):
        row = session.get_one(WorkspaceTokenUsage, (org_a, month))
        assert (row.input_tokens, row.output_tokens, row.cost_micros, row.run_count) == (100 * n, 50 * n, 7 * n, n)


def test_add_token_usage_returns_totals_and_normalizes_the_month(db: MigratedDatabase, org_a: uuid.UUID) -> None:
    with db.app_session() as session, tenant_transaction(session, org_a):
        first = add_token_usage(session, org_a, datetime(2026, 4, 17, 23, 0, tzinfo=UTC), 10, 20, 30)
        second = add_token_usage(session, org_a, date(2026, 4, 2), 1, 2, 3)
        assert (first.input_tokens, first.run_count) == (10, 1)
        assert (second.input_tokens, second.output_tokens, second.cost_micros, second.run_count) == (11, 22, 33, 2)
        months = session.execute(select(WorkspaceTokenUsage.month)).scalars().all()
        assert months == [date(2026, 4, 1)]


def test_add_token_usage_rejects_negative_values(db: MigratedDatabase, org_a: uuid.UUID) -> None:
    with db.app_session() as session, tenant_transaction(session, org_a), pytest.raises(ValueError):
        add_token_usage(session, org_a, date(2026, 4, 1), -1, 0, 0)


def test_add_agent_usage(db: MigratedDatabase, org_a: uuid.UUID) -> None:
    with db.app_session() as session, tenant_transaction(session, org_a):
        agent = create_agent(session, org_a)
        add_agent_usage(session, org_a, agent.id, date(2026, 5, 9), 5, 6, 7)
        totals = add_agent_usage(session, org_a, agent.id, date(2026, 5, 30), 5, 6, 7)
        assert (totals.input_tokens, totals.cost_micros, totals.run_count) == (10, 14, 2)
        assert session.get_one(AgentUsageMonthly, (agent.id, date(2026, 5, 1))).output_tokens == 12


class TestUpsertInsight:
    def _upsert(self, db: MigratedDatabase, org: uuid.UUID, key: str, title: str) -> tuple[uuid.UUID, str, bool]:
        with db.app_session() as session, tenant_transaction(session, org):
            result = upsert_insight(
                session,
                org_id=org,
                dedupe_key=key,
                area="crm",
                title=title,
                suggested_actions=[{"action": "send_winback", "count": 3}],
            )
            return result.id, result.status, result.created

    def _set_status(self, db: MigratedDatabase, org: uuid.UUID, insight_id: uuid.UUID, status: str) -> None:
        with db.app_session() as session, tenant_transaction(session, org):
            session.execute(
                update(WorkspaceInsight)
                .where(WorkspaceInsight.id == insight_id)
                .values(status=status, status_changed_at=datetime.now(UTC))
            )

    @pytest.mark.parametrize("status", [InsightStatus.SEEN, InsightStatus.DISMISSED, InsightStatus.ACTIONED])
    def test_preserves_the_owners_status_and_refreshes_content(
        self, db: MigratedDatabase, org_a: uuid.UUID, status: InsightStatus
    ) -> None:
        key = f"cold-leads:{uuid.uuid4().hex[:6]}"
        insight_id, first_status, created = self._upsert(db, org_a, key, "3 leads went cold")
        assert (first_status, created) == (InsightStatus.NEW, True)

        self._set_status(db, org_a, insight_id, status)
        again_id, again_status, created = self._upsert(db, org_a, key, "5 leads went cold")
        assert (again_id, again_status, created) == (insight_id, status, False)

        with db.app_session() as session, tenant_transaction(session, org_a):
            row = session.get_one(WorkspaceInsight, insight_id)
            assert (row.status, row.title) == (status, "5 leads went cold")
            assert row.status_changed_at is not None

    def test_open_stays_open_and_keys_are_per_org(
        self, db: MigratedDatabase, org_a: uuid.UUID, org_b: uuid.UUID
    ) -> None:
        key = "same-key-in-two-orgs"
        a_id, _, _ = self._upsert(db, org_a, key, "A")
        b_id, b_status, b_created = self._upsert(db, org_b, key, "B")
        assert a_id != b_id and (b_status, b_created) == (InsightStatus.NEW, True)
        again_id, status, created = self._upsert(db, org_a, key, "A2")
        assert (again_id, status, created) == (a_id, InsightStatus.NEW, False)
