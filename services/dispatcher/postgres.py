"""What the dispatcher asks PostgreSQL: who is over budget, how many runs an org may start.

Neither question is asked per message. The budget view is refreshed in the background
every ``DISPATCHER_BUDGET_REFRESH_S``; the rate-limit admission is one transaction per
batch, one call per org in it (``switchboard.db.lookups``: SECURITY DEFINER functions of
revision 0008, the only way the application role reaches across orgs).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg
from sqlalchemy.engine import make_url

from services.dispatcher import metrics
from services.dispatcher.limits import BudgetView, Grant, Reservoir
from switchboard.db import lookups
from switchboard.db.usage import month_start
from switchboard.observability.logging import get_logger

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

log = get_logger(__name__)


class PostgresAdmission:
    """``AdmissionClient`` on ``admit_org_runs``: the per-org limit holds across all workers.

    A batch's demand is served first from the worker's ``Reservoir`` (run starts taken
    earlier in the same window); only what is missing, plus a small prefetch, is asked of
    PostgreSQL: one transaction, one call per org, on a dedicated connection held by the
    worker (plain psycopg: the SQLAlchemy async layer cost more than the query). Orgs are
    admitted in id order, so two workers wanting runs for the same orgs lock the counter
    rows in the same order and never deadlock; a deadlock or serialization failure anyway
    is retried, a lost connection is reopened next batch.
    """

    def __init__(self, url: str, *, window_s: int, default_limit: int, prepared_statements: bool = True) -> None:
        self._dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        self._prepared_statements = prepared_statements
        self._window_s = window_s
        self._default_limit = default_limit
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._reservoirs: dict[uuid.UUID, Reservoir] = {}

    async def admit(self, demand: Mapping[uuid.UUID, int]) -> Mapping[uuid.UUID, Grant]:
        now = datetime.now(UTC)
        grants: dict[uuid.UUID, Grant] = {}
        missing: dict[uuid.UUID, int] = {}
        for org_id, wanted in demand.items():
            reservoir = self._reservoirs.setdefault(org_id, Reservoir())
            served = reservoir.take_local(wanted, now)
            if served == wanted:
                assert reservoir.window_ends_at is not None
                grants[org_id] = Grant(served, reservoir.window_ends_at)
            else:
                grants[org_id] = Grant(served, now)
                missing[org_id] = wanted - served
        if not missing:
            return grants
        for attempt in range(1, 4):
            try:
                fetched = await self._admit_once({o: self._reservoirs[o].request_size(n) for o, n in missing.items()})
                break
            except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure):
                if attempt == 3:
                    raise
                await asyncio.sleep(0.01 * attempt)
            except psycopg.OperationalError:
                await self.close()
                raise
        for org_id, (admitted, window_ends_at, limit) in fetched.items():
            served = self._reservoirs[org_id].refill(admitted, window_ends_at, limit, missing[org_id], now)
            grants[org_id] = Grant(grants[org_id].admitted + served, window_ends_at)
        return grants

    async def _admit_once(self, requests: Mapping[uuid.UUID, int]) -> dict[uuid.UUID, tuple[int, datetime, int]]:
        if self._conn is None or self._conn.closed:
            # Prepared from the first run (it runs every batch), unless prepared statements are off.
            self._conn = await psycopg.AsyncConnection.connect(
                self._dsn, prepare_threshold=0 if self._prepared_statements else None
            )
        conn = self._conn
        fetched: dict[uuid.UUID, tuple[int, datetime, int]] = {}
        async with conn.transaction():
            # The counter is not worth a WAL flush per batch: a database crash may forget the
            # last few milliseconds of increments (the limit is then briefly loose, never
            # tighter), and the batch no longer waits for the disk.
            await conn.execute("SET LOCAL synchronous_commit = off")
            for org_id in sorted(requests):
                cursor = await conn.execute(
                    "SELECT admitted, window_ends_at, limit_per_window FROM admit_org_runs(%s, %s, %s, %s)",
                    (org_id, requests[org_id], self._window_s, self._default_limit),
                )
                row = await cursor.fetchone()
                assert row is not None
                fetched[org_id] = (int(row[0]), row[1], int(row[2]))
        return fetched

    async def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
            self._conn = None


class BudgetWatcher:
    """Keeps the set of orgs over their monthly budget fresh; the last good view survives errors."""

    def __init__(self, engine: AsyncEngine, *, refresh_s: float) -> None:
        self._engine = engine
        self._refresh_s = refresh_s
        self.view = BudgetView()

    def current(self) -> BudgetView:
        if self.view.read_at is not None:
            metrics.BUDGET_VIEW_AGE.set((datetime.now(UTC) - self.view.read_at).total_seconds())
        return self.view

    async def refresh(self) -> None:
        now = datetime.now(UTC)
        async with self._engine.connect() as conn:
            rows = await conn.run_sync(lambda sync: lookups.list_orgs_over_budget(sync, month_start(now)))
            await conn.rollback()
        previous = set(self.view.over)
        self.view = BudgetView({r.org_id: r.exceeded for r in rows}, now)
        added = set(self.view.over) - previous
        if added:
            log.warning("organizations over their monthly budget", extra={"organization_ids": sorted(map(str, added))})

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.refresh()
            except Exception:
                log.warning("budget refresh failed; keeping the last view", exc_info=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self._refresh_s)
