"""A run's queued outbound messages (its send tool's intents) that no send claimed yet.

The notifier sends them when the run completes. Two writers must withdraw them instead: the
notifier, for a run that must not reach the customer (a handoff, a failure, an erased
contact), and the runner, for a lost run whose recovery attempt runs the turn again
(services/runner/superseded.py). A message a send claimed (it has a ``run_deliveries`` row)
is the notifier's and is never touched here. What an owner's approval queued carries the
proposing run's id too, and says so (``attributes`` key :data:`APPROVED`, set by the tool
server): it is the owner's act, and both writers leave it to the approval's delivery.
"""

from __future__ import annotations

import uuid
from typing import Final

from sqlalchemy import ColumnElement, exists, update
from sqlalchemy.ext.asyncio import AsyncSession

from switchboard.db.enums import MessageDeliveryStatus, MessageDirection
from switchboard.db.models import Message, RunDelivery

# ``messages.attributes`` key of a message an owner's approval queued.
APPROVED: Final = "approved"


def queued(org_id: uuid.UUID, run_id: uuid.UUID, *, keep_approved: bool) -> list[ColumnElement[bool]]:
    """The run's outbound messages still pending that no send claimed (``keep_approved``: not
    those an owner's approval queued)."""
    conditions = [
        Message.org_id == org_id,
        Message.run_id == run_id,
        Message.direction == MessageDirection.OUTBOUND.value,
        Message.delivery_status == MessageDeliveryStatus.PENDING.value,
        ~exists().where(RunDelivery.message_id == Message.id),
    ]
    if keep_approved:
        conditions.append(~Message.attributes.has_key(APPROVED))
    return conditions


async def cancel_queued_messages(
    session: AsyncSession, org_id: uuid.UUID, run_id: uuid.UUID, reason: str, *, keep_approved: bool
) -> int:
    """Mark the run's queued, unclaimed messages ``failed`` with ``reason`` (in the caller's transaction)."""
    result = await session.execute(
        update(Message)
        .where(*queued(org_id, run_id, keep_approved=keep_approved))
        .values(delivery_status=MessageDeliveryStatus.FAILED.value, delivery_error=reason)
    )
    return int(getattr(result, "rowcount", 0) or 0)
