"""The dispatcher's SECURITY DEFINER functions (revision 0008): budgets and the org rate limit."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest
from sqlalchemy import text
from sqlalchemy.exc import ProgrammingError
from sqlalchemy.orm import sessionmaker

from switchboard.db import lookups
from switchboard.db.models import BudgetPolicy, WorkspaceTokenUsage
from switchboard.db.session import tenant_transaction
from switchboard.db.usage import month_start

from .conftest import MigratedDatabase
from .factories import create_agent

pytestmark = pytest.mark.integration


def _set_rate_limit(db: MigratedDatabase, org: uuid.UUID, limit: int) -> None:
    with db.owner_session() as session, tenant_transaction(session, org):
        session.execute(
            text("UPDATE organizations SET rate_limit_runs_per_minute = :n WHERE id = :o"), {"n": limit, "o": org}
        )


def _admit(
    db: MigratedDatabase, org: uuid.UUID, n: int, *, window: int = 3600, default: int = 60
) -> lookups.RunAdmission:
    with db.app_session() as session, session.begin():
        return lookups.admit_org_runs(session, org, n, window_seconds=window, default_limit=default)


class TestAdmitOrgRuns:
    def test_admits_up_to_the_orgs_limit_per_window(self, db: MigratedDatabase, org_a: uuid.UUID) -> None:
        _set_rate_limit(db, org_a, 5)
        assert [_admit(db, org_a, n).admitted for n in (3, 4, 1)] == [3, 2, 0]
        grant = _admit(db, org_a, 1)
        assert grant.window_ends_at > datetime.now(UTC)

    def test_an_unknown_org_gets_the_callers_default(self, db: MigratedDatabase) -> None:
        stranger = uuid.uuid4()
        assert _admit(db, stranger, 10, default=7).admitted == 7
        assert _admit(db, stranger, 10, default=7).admitted == 0

    def test_a_new_window_starts_from_zero(self, db: MigratedDatabase, org_a: uuid.UUID) -> None:
        _set_rate_limit(db, org_a, 2)
        first = _admit(db, org_a, 2, window=1)
        assert first.admitted == 2
        # Wait for the next one-second window (epoch-aligned).
        import time

        time.sleep(max(0.0, first.window_ends_at.timestamp() - time.time()) + 0.05)
        assert _admit(db, org_a, 2, window=1).admitted == 2

    def test_concurrent_workers_never_exceed_the_limit(self, db: MigratedDatabase, org_b: uuid.UUID) -> None:
        _set_rate_limit(db, org_b, 12)
        threads = 10
        engine = db.engine(pool_size=threads, max_overflow=0)
        sessions = sessionmaker(engine)
        start = threading.Barrier(threads)

        def worker(_: int) -> int:
            start.wait()
            with sessions() as session, session.begin():
                return lookups.admit_org_runs(session, org_b, 3, window_seconds=3600, default_limit=60).admitted

        with ThreadPoolExecutor(threads) as pool:
            admitted = list(pool.map(worker, range(threads)))
        assert sum(admitted) == 12

    def test_the_counter_table_is_out_of_the_app_roles_reach(self, db: MigratedDatabase) -> None:
        with db.app_session() as session, session.begin(), pytest.raises(ProgrammingError) as exc:
            session.execute(text("SELECT count(*) FROM dispatch_rate_windows"))
        assert "permission denied" in str(exc.value.orig)


class TestOrgsOverBudget:
    def test_lists_orgs_whose_org_policy_is_reached_and_says_which_cap(
        self, db: MigratedDatabase, org_a: uuid.UUID, org_b: uuid.UUID
    ) -> None:
        month = month_start(datetime.now(UTC))
        tokens_over, cost_over, under, disabled, agent_only = (db.new_org() for _ in range(5))
        setups = [
            (tokens_over, {"token_limit": 100}, (120, 10, 0)),
            (cost_over, {"cost_limit_micros": 1_000}, (1, 1, 1_000)),
            (under, {"token_limit": 1_000, "cost_limit_micros": 1_000_000}, (10, 10, 10)),
            (disabled, {"token_limit": 1, "enabled": False}, (50, 50, 50)),
        ]
        for org, policy, (tin, tout, cost) in setups:
            with db.owner_session() as session, tenant_transaction(session, org):
                session.add(BudgetPolicy(org_id=org, scope="organization", **policy))
                session.add(
                    WorkspaceTokenUsage(org_id=org, month=month, input_tokens=tin, output_tokens=tout, cost_micros=cost)
                )
        with db.owner_session() as session, tenant_transaction(session, agent_only):
            agent = create_agent(session, agent_only)
            session.add(BudgetPolicy(org_id=agent_only, scope="agent", agent_id=agent.id, token_limit=1))
            session.add(WorkspaceTokenUsage(org_id=agent_only, month=month, input_tokens=99, output_tokens=0))
        with db.app_session() as session, session.begin():
            over = {o.org_id: o.exceeded for o in lookups.list_orgs_over_budget(session, month)}
            # Another month: nothing used yet.
            assert not {
                o.org_id for o in lookups.list_orgs_over_budget(session, month.replace(year=month.year - 1))
            } & {
                tokens_over,
                cost_over,
            }
        assert over.get(tokens_over) == "tokens"
        assert over.get(cost_over) == "cost"
        assert not {under, disabled, agent_only} & set(over)
