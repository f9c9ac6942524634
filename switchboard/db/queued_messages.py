"""A run's queued outbound messages (its send tool's intents) that no send claimed yet.

The notifier sends them when the run completes. Two writers must cancel them instead: the
notifier, for a run that must not reach the customer (a handoff, a failure, an erased
contact), and the runner, for a lost attempt whose recovery runs the turn again
(services/runner/superseded.py). A message a send claimed (it has a ``run_deliveries`` row)
is the notifier's and is never touched here.
"""

from __future__ import annotations

import uuid

from sqlalchemy import exists, update
from sqlalchemy.ext.asyncio import AsyncSession

from switchboard.db.enums import MessageDeliveryStatus, MessageDirection
from switchboard.db.models import Message, RunDelivery


async def cancel_queued_messages(session: AsyncSession, org_id: uuid.UUID, run_id: uuid.UUID, reason: str) -> int:
    """Mark the run's queued, unclaimed messages ``failed`` with ``reason`` (in the caller's transaction)."""
    result = await session.execute(
        update(Message)
        .where(
            Message.org_id == org_id,
            Message.run_id == run_id,
            Message.direction == MessageDirection.OUTBOUND.value,
            Message.delivery_status == MessageDeliveryStatus.PENDING.value,
            ~exists().where(RunDelivery.message_id == Message.id),
        )
        .values(delivery_status=MessageDeliveryStatus.FAILED.value, delivery_error=reason)
    )
    return int(getattr(result, "rowcount", 0) or 0)
