"""Enqueueing events in the transactional outbox.

A handler that changes rows and must announce it (publish, run recorded...)
adds the serialized record here *in the same transaction*; the relay
publishes it after commit. Either both the rows and the event exist, or
neither does [SPEC §2.4].
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.orm import Session

from switchboard.contracts import Serde, TopicSpec, encode_key
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


def enqueue_record(
    session: Session,
    topic: TopicSpec[Any],
    record: Any,
    *,
    serde: Serde,
    headers: Mapping[str, str] | None = None,
) -> OutboxEvent:
    """Encode ``record`` with ``topic``'s contract and add it to the caller's transaction.

    Writers of the same key must serialize on a row lock (e.g. the conversation
    row) before calling this, so outbox ids follow commit order per key and the
    relay, which publishes by id, keeps each key's order.
    """
    event_headers = {"event_id": str(getattr(record, "event_id", "")), **(headers or {})}
    return enqueue(
        session,
        topic=topic.name,
        key=encode_key(topic, record),
        payload=serde.encode(topic, record),
        headers=event_headers,
    )
