"""The morning pass: compose the digest of every org whose local day has begun without one.

A day's digest is otherwise composed when a record of that day arrives; before the first run,
handoff or insight of the day the owner would find no Home at all, and nothing of what still
waits from the day before (docs/brief.md "The morning digest"). Every brief replica runs the
pass; composing is idempotent and serialized per org and day (``lock_day``), so replicas only
repeat each other's work.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime
from typing import Final

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session

from services.brief import store
from services.brief.catalog import DigestCatalog
from switchboard.db.daily_brief import org_zone
from switchboard.db.session import async_tenant_transaction
from switchboard.observability.logging import get_logger

log = get_logger(__name__)

PAGE: Final = 200
FIRST_PASS_WAIT_S: Final = 60.0
_MISSING = text("SELECT org_id, day FROM list_orgs_missing_digest(:now, :limit)")


def compose_day(session: Session, catalog: DigestCatalog, org_id: uuid.UUID, day: date) -> None:
    """Compose and store one org's digest of ``day`` (in the caller's tenant transaction)."""
    store.recompute(session, org_id, [day], org_zone(session, org_id).key, catalog)


async def compose_missing(
    sessions: async_sessionmaker[AsyncSession], catalog: DigestCatalog, stop: asyncio.Event | None = None
) -> int:
    """One pass: page through the orgs without a digest of their local today; how many were composed."""
    composed = 0
    while stop is None or not stop.is_set():
        async with sessions() as session:
            missing = (await session.execute(_MISSING, {"now": datetime.now(UTC), "limit": PAGE})).all()
        this_page = 0
        for org_id, day in missing:
            if stop is not None and stop.is_set():
                break
            try:
                async with sessions() as session, async_tenant_transaction(session, org_id):
                    await session.run_sync(
                        lambda s, o=org_id, d=day: compose_day(s, catalog, o, d)  # type: ignore[misc]
                    )
            except Exception:  # one org's failure must not keep the others' mornings away
                log.warning("morning digest failed", extra={"organization_id": str(org_id)}, exc_info=True)
                continue
            this_page += 1
            await asyncio.sleep(0)  # composing is CPU: let the consumer and the probes have a turn
        composed += this_page
        # A short page was the last; a page where every org failed would come back the same.
        if len(missing) < PAGE or this_page == 0:
            break
    return composed


async def run_mornings(
    sessions: async_sessionmaker[AsyncSession],
    catalog: DigestCatalog,
    interval_s: float,
    stop: asyncio.Event,
    *,
    after: Callable[[], Awaitable[bool]] | None = None,
) -> None:
    """A pass at start and every ``interval_s``; a failed pass is logged and tried again next time.

    ``after``: the first pass waits for it (the consumer's first join, up to ``FIRST_PASS_WAIT_S``):
    at the hour many orgs' days begin, a pass composes thousands of digests, and started at once it
    kept the consumer from joining its group — the replica stayed unready (found on a database of
    22,000 orgs, 2026-12-05)."""
    if after is not None:
        deadline = asyncio.get_running_loop().time() + FIRST_PASS_WAIT_S
        while not stop.is_set() and not await after() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.2)
    while not stop.is_set():
        try:
            composed = await compose_missing(sessions, catalog, stop)
            if composed:
                log.info("morning digests composed", extra={"orgs": composed})
        except Exception:
            log.exception("morning digest pass failed")
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
        except TimeoutError:
            continue
