"""The usage ledger (append, fold, read) and the insight upsert, against a real PostgreSQL."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime

import pytest
from sqlalchemy import func, select, text, update
from sqlalchemy.orm import sessionmaker

from switchboard.db.enums import InsightStatus
from switchboard.db.insights import upsert_insight
from switchboard.db.models import AgentUsageMonthly, UsageEntry, WorkspaceInsight, WorkspaceTokenUsage
from switchboard.db.session import tenant_transaction
from switchboard.db.usage import UsageTotals, agent_month_totals, fold_usage, month_totals, record_usage

from .conftest import MigratedDatabase
from .factories import create_agent

pytestmark = pytest.mark.integration

THREADS = 20
ENTRIES_PER_THREAD = 5


def _fold_all(db: MigratedDatabase) -> int:
    with db.app_engine.begin() as connection:
        return fold_usage(connection)


def test_concurrent_runs_and_folds_count_every_entry_exactly_once(db: MigratedDatabase, org_a: uuid.UUID) -> None:
    """Twenty writers append while four folders fold: nothing lost, nothing counted twice."""
    engine = db.engine(pool_size=THREADS + 4, max_overflow=0)
    sessions = sessionmaker(engine)
    with db.app_session() as session, tenant_transaction(session, org_a):
        agent = create_agent(session, org_a)
    month = date(2026, 3, 1)
    start = threading.Barrier(THREADS + 4)
    writing = threading.Event()

    def writer(_: int) -> None:
        start.wait()
        for _ in range(ENTRIES_PER_THREAD):
            with sessions() as session, tenant_transaction(session, org_a):
                record_usage(session, org_a, agent.id, month, 100, 50, 7)

    def folder(_: int) -> int:
        start.wait()
        folded = 0
        while not writing.is_set():
            with engine.begin() as connection:
                folded += fold_usage(connection, limit=7)
        return folded

    with ThreadPoolExecutor(max_workers=THREADS + 4) as pool:
        folders = [pool.submit(folder, i) for i in range(4)]
        list(pool.map(writer, range(THREADS)))
        writing.set()
        folded = sum(f.result() for f in folders)
    folded += _fold_all(db)

    n = THREADS * ENTRIES_PER_THREAD
    assert folded == n
    with db.app_session() as session, tenant_transaction(session, org_a):
        row = session.get_one(WorkspaceTokenUsage, (org_a, month))
        assert (row.input_tokens, row.output_tokens, row.cost_micros, row.run_count) == (100 * n, 50 * n, 7 * n, n)
        per_agent = session.get_one(AgentUsageMonthly, (agent.id, month))
        assert (per_agent.input_tokens, per_agent.cost_micros, per_agent.run_count) == (100 * n, 7 * n, n)
        assert session.scalar(select(func.count()).select_from(UsageEntry)) == 0


def test_readers_add_entries_not_folded_yet(db: MigratedDatabase, org_a: uuid.UUID) -> None:
    with db.app_session() as session, tenant_transaction(session, org_a):
        agent = create_agent(session, org_a)
        assert month_totals(session, org_a, date(2026, 4, 1)) is None
        record_usage(session, org_a, agent.id, datetime(2026, 4, 17, 23, 0, tzinfo=UTC), 10, 20, 30)
    assert _fold_all(db) == 1
    with db.app_session() as session, tenant_transaction(session, org_a):
        record_usage(session, org_a, agent.id, date(2026, 4, 2), 1, 2, 3)
        record_usage(session, org_a, None, date(2026, 4, 9), 5, 5, 5, runs=0)  # a summary: the org's only
        totals = month_totals(session, org_a, date(2026, 4, 30))
        assert totals == UsageTotals(16, 27, 38, 2)
        assert agent_month_totals(session, org_a, date(2026, 4, 1)) == {agent.id: UsageTotals(11, 22, 33, 2)}
        assert agent_month_totals(session, org_a, date(2026, 4, 1), agent_id=uuid.uuid4()) == {}
    assert _fold_all(db) == 2
    with db.app_session() as session, tenant_transaction(session, org_a):
        assert month_totals(session, org_a, date(2026, 4, 1)) == UsageTotals(16, 27, 38, 2)
        assert agent_month_totals(session, org_a, date(2026, 4, 1)) == {agent.id: UsageTotals(11, 22, 33, 2)}
        months = session.execute(select(WorkspaceTokenUsage.month)).scalars().all()
        assert months == [date(2026, 4, 1)]


def test_fold_keeps_orgs_apart_and_leaves_the_caller_unscoped(
    db: MigratedDatabase, org_a: uuid.UUID, org_b: uuid.UUID
) -> None:
    for org, tokens in ((org_a, 10), (org_b, 1000)):
        with db.app_session() as session, tenant_transaction(session, org):
            record_usage(session, org, None, date(2026, 6, 1), tokens, 0, 0)
    with db.app_engine.begin() as connection:
        assert fold_usage(connection) == 2
        # The function scoped itself per org and restored the caller's (empty) tenant.
        assert connection.scalar(text("SELECT current_setting('app.org_id', true)")) in (None, "")
    for org, tokens in ((org_a, 10), (org_b, 1000)):
        with db.app_session() as session, tenant_transaction(session, org):
            assert month_totals(session, org, date(2026, 6, 1)) == UsageTotals(tokens, 0, 0, 1)


def test_record_usage_rejects_negative_values(db: MigratedDatabase, org_a: uuid.UUID) -> None:
    with db.app_session() as session, tenant_transaction(session, org_a), pytest.raises(ValueError):
        record_usage(session, org_a, None, date(2026, 4, 1), -1, 0, 0)


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
