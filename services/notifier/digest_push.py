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
from collections.abc import Mapping
from datetime import UTC, date, datetime
from typing import Any, Final

from services.notifier.notifications import NotificationQueue
from services.notifier.store import NotifierStore
from switchboard.observability.logging import get_logger

log = get_logger(__name__)

EVENT_TYPE: Final = "home.digest"
PAGE: Final = 200


def dedupe_key(day: date) -> str:
    return f"home_digest:{day.isoformat()}"


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def summary(today: Mapping[str, Any], yesterday: Mapping[str, Any] | None) -> str:
    """One line a person reads in a chat or a mail subject: yesterday's work, what waits now."""
    parts: list[str] = []
    if yesterday is not None:
        pulse = yesterday.get("pulse", {})
        spend = int(pulse.get("spend_micros", 0)) / 1_000_000
        parts.append(
            f"Yesterday: {_count(int(pulse.get('runs', 0)), 'run', 'runs')}, "
            f"{_count(int(pulse.get('replies', 0)), 'reply', 'replies')}, "
            f"{_count(int(pulse.get('handoffs', 0)), 'handoff', 'handoffs')}, ${spend:.2f} spent."
        )
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


async def push_due(store: NotifierStore, queue: NotificationQueue, now: datetime | None = None) -> int:
    """One pass: queue and start sending every due digest; how many this notifier queued."""
    queued = 0
    while True:
        due = await store.due_digests(now or datetime.now(UTC), PAGE)
        created = 0
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
            created += 1
            if notification is not None:  # None: another notifier queued it first and sends it
                queue.submit(org_id, notification)
                queued += 1
        # A short page was the last; a page where every org failed would come back the same.
        if len(due) < PAGE or created == 0:
            return queued


async def run_digest_pushes(
    store: NotifierStore, queue: NotificationQueue, interval_s: float, stop: asyncio.Event
) -> None:
    """A pass at start and every ``interval_s``; a failed pass is logged and tried again next time."""
    while not stop.is_set():
        try:
            queued = await push_due(store, queue)
            if queued:
                log.info("morning digests queued", extra={"orgs": queued})
        except Exception as exc:  # the database away: the next pass tries again
            log.warning("morning digest pass failed", extra={"error": type(exc).__name__})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
