"""Enqueueing events in the transactional outbox.

A handler that changes rows and must announce it (publish, run recorded...)
adds the serialized record here *in the same transaction*; the relay
publishes it after commit. Either both the rows and the event exist, or
neither does [SPEC §2.4].
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Table, insert
from sqlalchemy.orm import Session

from switchboard.contracts import Serde, TopicSpec, encode_key
from switchboard.db.models.outbox import OutboxEvent

_OUTBOX: Table = OutboxEvent.__table__  # type: ignore[assignment]
# A Core insert, executed at once: the ORM's unit of work (add, then flush at commit) cost more
# than the statement itself on every hot path (docs/benchmarks.md "End to end").
_INSERT = insert(_OUTBOX).returning(_OUTBOX.c.id)


def enqueue(
    session: Session,
    *,
    topic: str,
    key: bytes | None,
    payload: bytes,
    headers: Mapping[str, str] | None = None,
) -> int:
    """Insert one already serialized record for ``topic`` in the caller's transaction; returns its
    outbox id. From async code: ``await session.run_sync(enqueue_record, ...)``."""
    outbox_id: int = session.execute(
        _INSERT, {"topic": topic, "key": key, "payload": payload, "headers": dict(headers or {})}
    ).scalar_one()
    return outbox_id


def enqueue_record(
    session: Session,
    topic: TopicSpec[Any],
    record: Any,
    *,
    serde: Serde,
    headers: Mapping[str, str] | None = None,
) -> int:
    """Encode ``record`` with ``topic``'s contract and insert it in the caller's transaction.

    Writers of the same key must serialize on a row lock (e.g. the conversation
    row) before calling this, so outbox ids follow commit order per key and the
    relay, which publishes by id, keeps each key's order.
    """
    return enqueue(session, **_row(topic, record, serde, headers))


class OutboxBatch:
    """Records a transaction inserts together, in one statement, when its work is done.

    For a transaction that writes many records (webhook group commit): one insert instead
    of one per record. The rule of ``enqueue_record`` still holds: the rows are inserted
    before the commit, while the writer still holds each key's row lock, and in the order
    they were added, so each key's records keep commit order.
    """

    def __init__(self) -> None:
        self._rows: list[dict[str, Any]] = []

    def add(
        self, topic: TopicSpec[Any], record: Any, *, serde: Serde, headers: Mapping[str, str] | None = None
    ) -> None:
        self._rows.append(_row(topic, record, serde, headers))

    def flush(self, session: Session) -> None:
        """Insert what was added (nothing when empty) in the caller's transaction."""
        if self._rows:
            session.execute(insert(_OUTBOX), self._rows)
            self._rows = []


def _row(topic: TopicSpec[Any], record: Any, serde: Serde, headers: Mapping[str, str] | None) -> dict[str, Any]:
    return {
        "topic": topic.name,
        "key": encode_key(topic, record),
        "payload": serde.encode(topic, record),
        "headers": {"event_id": str(getattr(record, "event_id", "")), **(headers or {})},
    }
