"""Notifications to the org's humans off the consume path (docs/notifier.md "Notifications").

A handoff or a budget incident is written as an ``org_notifications`` row while its record is
handled (that row is the receipt: a redelivery finds it). The POST to the org's webhook, with
its retries, then runs here in the background, so an org webhook that is slow or down for a
while delays only its own notifications — before, the partition's next records (other orgs'
replies among them) waited behind up to the whole retry budget.

Notifications are at least once: a stop gives the sends in flight ``grace_s`` and leaves the
rest ``pending``; so does a crash. The sweep (``list_pending_notifications``, revision 0022)
hands rows pending for longer than ``NOTIFIER_STALE_CLAIM_S`` to :meth:`submit` again, on
whichever notifier finds them; receivers deduplicate on ``X-Switchboard-Event-Id``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

from services.notifier.store import Notification
from switchboard.observability.logging import get_logger

log = get_logger(__name__)

# Sends one notification; the limiter, when given, bounds its attempts, not its backoff waits.
Deliver = Callable[[uuid.UUID, Notification, asyncio.Semaphore | None], Awaitable[None]]


class NotificationQueue:
    """One background task per notification; a notification already on its way is not submitted twice."""

    def __init__(self, deliver: Deliver) -> None:
        self._deliver = deliver
        self._tasks: dict[uuid.UUID, asyncio.Task[None]] = {}
        self._closing = False

    @property
    def in_flight(self) -> frozenset[uuid.UUID]:
        return frozenset(self._tasks)

    def submit(self, org_id: uuid.UUID, notification: Notification, limiter: asyncio.Semaphore | None = None) -> bool:
        """Start sending it (each attempt once ``limiter`` lets it, when given); False when it is already
        being sent by this process, or the queue is closing (the row stays ``pending`` for the
        next notifier's sweep: a task started now would be cut off at the loop's end)."""
        if self._closing or notification.id in self._tasks:
            return False
        task = asyncio.create_task(self._run(org_id, notification, limiter), name=f"notify-{notification.id}")
        self._tasks[notification.id] = task
        task.add_done_callback(lambda _: self._tasks.pop(notification.id, None))
        return True

    async def _run(self, org_id: uuid.UUID, notification: Notification, limiter: asyncio.Semaphore | None) -> None:
        try:
            await self._deliver(org_id, notification, limiter)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the database away while recording: the row stays pending, the sweep retries
            log.warning(
                "notification not recorded",
                extra={"org_id": str(org_id), "notification": notification.event_type, "error": type(exc).__name__},
            )

    async def wait_idle(self, timeout_s: float) -> None:
        """Until nothing is in flight (tests, and the graceful stop)."""
        if self._tasks:
            await asyncio.wait(list(self._tasks.values()), timeout=timeout_s)

    async def abandon(self) -> None:
        """A kill: sends stop where they are; their rows stay ``pending`` for the next sweep."""
        await self.close(0)

    async def close(self, grace_s: float) -> None:
        """At a stop: sends in flight get ``grace_s``; the rest are cancelled and stay ``pending``."""
        self._closing = True
        await self.wait_idle(grace_s)
        for task in list(self._tasks.values()):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
