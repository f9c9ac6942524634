"""NotificationQueue at a stop: nothing new starts once it closes (the row waits for the sweep)."""

from __future__ import annotations

import asyncio
import uuid

from services.notifier.notifications import NotificationQueue
from services.notifier.store import Notification


def _notification() -> Notification:
    return Notification(uuid.uuid4(), uuid.uuid4(), "message.undelivered", {})


async def test_a_notification_submitted_while_the_queue_closes_is_left_for_the_sweep() -> None:
    delivered: list[uuid.UUID] = []

    async def deliver(org_id: uuid.UUID, notification: Notification, _: asyncio.Semaphore | None) -> None:
        delivered.append(notification.id)

    queue = NotificationQueue(deliver)
    first = _notification()
    assert queue.submit(uuid.uuid4(), first)
    closing = asyncio.create_task(queue.close(grace_s=1.0))
    await asyncio.sleep(0)  # close() has begun
    late = _notification()
    assert not queue.submit(uuid.uuid4(), late), "a task started now would be cut off at the loop's end"
    await closing
    assert delivered == [first.id]
