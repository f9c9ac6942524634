"""The transactional outbox: events written in the same transaction as the rows
they describe, published to Kafka afterwards by the relay [SPEC §2.4]."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, CheckConstraint, Index, Integer, text
from sqlalchemy.orm import Mapped, mapped_column

from switchboard.db.base import Base, CreatedAt


class OutboxEvent(CreatedAt, Base):
    """One record to produce. A platform table (no ``org_id``, no RLS); see docs/database.md.

    ``id`` is a bigserial so the relay publishes in commit-ish order; ``key`` and
    ``payload`` are the already serialized Kafka key and value (Avro bytes).
    """

    __tablename__ = "outbox"
    __table_args__ = (
        CheckConstraint("char_length(topic) BETWEEN 1 AND 249", name="topic_length"),
        CheckConstraint("jsonb_typeof(headers) = 'object'", name="headers_object"),
        CheckConstraint("attempts >= 0", name="attempts_non_negative"),
        CheckConstraint("published_at IS NULL OR dead_lettered_at IS NULL", name="published_or_dead_lettered"),
        # The relay's query: oldest pending (neither published nor dead-lettered) first.
        Index(
            "ix_outbox_unpublished", "id", postgresql_where=text("published_at IS NULL AND dead_lettered_at IS NULL")
        ),
        # Pruning published rows by age.
        Index("ix_outbox_published_at", "published_at", postgresql_where=text("published_at IS NOT NULL")),
        # Rows set aside by the relay: few, listed by operators, pruned by age.
        Index("ix_outbox_dead_lettered_at", "dead_lettered_at", postgresql_where=text("dead_lettered_at IS NOT NULL")),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    # The logical topic name (without the deployment's prefix).
    topic: Mapped[str]
    key: Mapped[bytes | None]
    payload: Mapped[bytes]
    # Kafka headers as {name: value}; values are strings (e.g. request id, schema id).
    headers: Mapped[dict[str, Any]] = mapped_column(server_default=text("'{}'::jsonb"))
    published_at: Mapped[datetime | None]
    # Failed publish attempts caused by the row itself (not by a broker outage).
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    last_error: Mapped[str | None]
    # Set when the relay gave up and sent the row to the dead-letter topic; it is then skipped.
    dead_lettered_at: Mapped[datetime | None]
