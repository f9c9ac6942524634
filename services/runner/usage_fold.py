"""The usage ledger's fold: runs append usage entries, this task moves them into the monthly counters.

Every runner runs one, every ``RUNNER_USAGE_FOLD_S`` (1 s): ``fold_usage_entries`` takes
entries ``FOR UPDATE SKIP LOCKED``, so replicas fold disjoint entries, and moves each into
the counters in the same transaction (exactly once). Readers add the entries not folded
yet, so the fold's period never makes a figure lag (docs/database.md "Usage ledger"). A
failed fold (the database away, a deadlock between two replicas' counter rows) leaves its
entries for the next one.
"""

from __future__ import annotations

import asyncio
import contextlib

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from switchboard.db.usage import fold_usage
from switchboard.observability.logging import get_logger

log = get_logger(__name__)


class UsageFolder:
    def __init__(self, engine: AsyncEngine, *, interval_s: float) -> None:
        self._engine = engine
        self._interval_s = interval_s

    async def run(self, stop: asyncio.Event) -> None:
        """Fold until ``stop``, then once more: what the last runs appended is folded at shutdown."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self._interval_s)
            await self.fold_once()

    async def fold_once(self) -> int:
        """One fold; returns the entries folded (0 after a failure, logged)."""
        try:
            async with self._engine.begin() as connection:
                return await connection.run_sync(fold_usage)
        except (DBAPIError, OSError) as exc:
            log.warning("usage fold failed; its entries wait for the next one", extra={"error": type(exc).__name__})
            return 0
