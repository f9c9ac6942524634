"""Enqueueing events in the transactional outbox.

A handler that changes rows and must announce it (publish, run recorded...)
adds the serialized record here *in the same transaction*; the relay
publishes it after commit. Either both the rows and the event exist, or
neither does [SPEC §2.4].
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy.orm import Session

from switchboard.db.models.outbox import OutboxEvent


def enqueue(
    session: Session,
    *,
    topic: str,
    key: bytes | None,
    payload: bytes,
    headers: Mapping[str, str] | None = None,
) -> OutboxEvent:
    """Add one already serialized record for ``topic`` to the caller's transaction."""
    event = OutboxEvent(topic=topic, key=key, payload=payload, headers=dict(headers or {}))
    session.add(event)
    return event
