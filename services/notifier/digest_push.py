"""The morning push: the day's Home digest to the org's webhook, at the org's ``digest_hour``.

The brief composes today's digest when the org's day begins and keeps it current; the owner
saw it only by opening Home. Every notifier runs this pass at start and every
``NOTIFIER_DIGEST_INTERVAL_S``: ``list_due_digests`` (revision 0033) names the orgs with a
webhook whose local hour reached their ``digest_hour`` and whose today has a digest but no
``home_digest:<day>`` notification; each gets one, event ``home.digest``, sent like any other
notification (at least once, the sweep re-sends what a crash left). The unique
``(org_id, dedupe_key)`` makes it once per org and day however many notifiers race
(docs/notifier.md "The morning digest push").
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Mapping
from datetime import UTC, date, datetime
from typing import Any, Final

from services.notifier.notifications import NotificationQueue
from services.notifier.store import NotifierStore
from switchboard.observability.logging import get_logger

log = get_logger(__name__)

EVENT_TYPE: Final = "home.digest"
PAGE: Final = 200
# Digest sends in flight at once per notifier (each takes a database connection to record).
SENDS_AT_ONCE: Final = 4


def dedupe_key(day: date) -> str:
    return f"home_digest:{day.isoformat()}"


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def summary(today: Mapping[str, Any], yesterday: Mapping[str, Any] | None) -> str:
    """One line a person reads in a chat or a mail subject: yesterday's work, what waits now.

    What went wrong is in it when it happened (replies that never arrived, customers left
    unanswered): the line on a phone is the one that most needs it."""
    parts: list[str] = []
    if yesterday is not None:
        pulse = yesterday.get("pulse", {})
        counts = [
            _count(int(pulse.get("runs", 0)), "run", "runs"),
            _count(int(pulse.get("replies", 0)), "reply", "replies"),
        ]
        if int(pulse.get("undelivered", 0)):
            counts.append(f"{pulse['undelivered']} not delivered")
        if int(pulse.get("unanswered", 0)):
            counts.append(f"{_count(int(pulse['unanswered']), 'customer', 'customers')} left unanswered")
        counts.append(_count(int(pulse.get("handoffs", 0)), "handoff", "handoffs"))
        spend = int(pulse.get("spend_micros", 0)) / 1_000_000
        parts.append(f"Yesterday: {', '.join(counts)}, ${spend:.2f} spent.")
    waiting = len(today.get("todo", []))
    parts.append(f"{_count(waiting, 'item waits', 'items wait')} for you." if waiting else "Nothing waits for you.")
    return " ".join(parts)


def payload(today: Mapping[str, Any], yesterday: Mapping[str, Any] | None) -> dict[str, Any]:
    """``data`` of ``home.digest``: today's digest as the API serves it, and yesterday's outcome."""
    return {
        "date": today["date"],
        "summary": summary(today, yesterday),
        "digest": dict(today),
        "yesterday": None
        if yesterday is None
        else {"date": yesterday["date"], "pulse": yesterday.get("pulse", {}), "done": yesterday.get("done", [])},
    }


async def push_due(
    store: NotifierStore, queue: NotificationQueue, limiter: asyncio.Semaphore, now: datetime | None = None
) -> int:
    """One pass over every due org, page by page in id order; how many this notifier queued.

    Keyset pages: an org that fails (logged) is passed, never met again in this pass, so a
    page of failing orgs cannot keep the rest from their mornings; the next pass retries it."""
    at = now or datetime.now(UTC)
    queued = 0
    after: uuid.UUID | None = None
    while True:
        due = await store.due_digests(at, PAGE, after)
        for org_id, day in due:
            try:
                today, yesterday = await store.digests(org_id, day)
                if today is None:  # gone since the question (the org deleted): nothing to tell
                    continue
                notification = await store.create_notification(
                    org_id, dedupe_key(day), EVENT_TYPE, payload(today, yesterday)
                )
            except Exception:  # one org's failure must not keep the others' mornings away
                log.warning("morning digest not queued", extra={"org_id": str(org_id)}, exc_info=True)
                continue
            if notification is not None:  # None: another notifier queued it first and sends it
                queue.submit(org_id, notification, limiter)
                queued += 1
        if len(due) < PAGE:
            return queued
        after = due[-1][0]


async def run_digest_pushes(
    store: NotifierStore, queue: NotificationQueue, interval_s: float, stop: asyncio.Event
) -> None:
    """A pass at start and every ``interval_s``; a failed pass is logged and tried again next time."""
    # At the hour a whole time zone is due at once: its sends share the notifier's database
    # pool and HTTP client with the customers' replies, so only so many go at a time.
    limiter = asyncio.Semaphore(SENDS_AT_ONCE)
    while not stop.is_set():
        try:
            queued = await push_due(store, queue, limiter)
            if queued:
                log.info("morning digests queued", extra={"orgs": queued})
        except Exception as exc:  # the database away: the next pass tries again
            log.warning("morning digest pass failed", extra={"error": type(exc).__name__})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
