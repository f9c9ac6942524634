"""The runners' sweep of runs whose runner died: no row stays ``running`` for good.

A run row is closed by its runner, or as lost by the claim of its next attempt. When the
last attempt's runner dies, the dispatcher announces the run lost (``run_completed``,
``processLost``) but no attempt comes to close the row; a dry run is not tracked by the
dispatcher at all. So every runner asks, every ``RUNNER_STALE_SWEEP_INTERVAL_S``, for active
rows whose heartbeat is older than ``RUNNER_STALE_SWEEP_AFTER_S`` (10 minutes: a live run
beats every 10 s, and the dispatcher recovers a silent one after its 30 s lease) and closes
each as lost — the same statement as a claim's, usage counted (``RunStore.close_stale``).
Replicas may race on a row: the close is conditional on the row being active, so it happens
once. Nothing is announced: the dispatcher already did, and a dry run has no one to tell but
the API, which reads the row.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol
from uuid import UUID

from switchboard.observability.logging import get_logger

log = get_logger(__name__)

SWEEP_BATCH = 100


class StaleRunStore(Protocol):
    async def stale_runs(self, *, older_than_s: float, limit: int) -> list[tuple[UUID, UUID]]: ...

    async def close_stale(self, org_id: UUID, run_id: UUID) -> None: ...


class StaleRunSweeper:
    def __init__(self, store: StaleRunStore, *, interval_s: float, older_than_s: float) -> None:
        self._store = store
        self._interval_s = interval_s
        self._older_than_s = older_than_s

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self._interval_s)
            if not stop.is_set():
                await self.sweep_once()

    async def sweep_once(self) -> int:
        """One pass; returns the runs closed (0 after a failure, logged: the next pass retries)."""
        closed = 0
        try:
            stale = await self._store.stale_runs(older_than_s=self._older_than_s, limit=SWEEP_BATCH)
        except Exception:
            log.error("stale run sweep failed; retrying at the next interval", exc_info=True)
            return 0
        for org_id, run_id in stale:
            labels = {"organization_id": str(org_id), "run_id": str(run_id)}
            try:
                await self._store.close_stale(org_id, run_id)
            except Exception:  # one row that fails must not hold back the others, pass after pass
                log.error("closing a stale run failed; the next pass retries it", extra=labels, exc_info=True)
                continue
            closed += 1
            log.warning("stale run closed as lost: its runner stopped heartbeating", extra=labels)
        return closed
