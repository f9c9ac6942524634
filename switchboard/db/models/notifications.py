"""What the notifier writes: one delivery claim per outbound message, the org's outgoing
webhook, and one row per notification sent to the org's humans (docs/notifier.md)."""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import CheckConstraint, ForeignKey, Index, Integer, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from switchboard.db.base import Base, OrgScoped, Timestamps, UUIDPrimaryKey, check_in


class DeliveryState(StrEnum):
    """Where one outbound message stands. ``claimed``: owned by a notifier, waiting its turn behind
    the run's earlier messages, never attempted (a redelivery may still send it; revision 0040).
    ``sending``: its attempt began. ``unknown``: the notifier stopped between that and learning the
    channel's answer; the message may or may not have reached the customer and is never sent again
    (at most once)."""

    CLAIMED = "claimed"
    SENDING = "sending"
    SENT = "sent"
    FAILED = "failed"
    UNKNOWN = "unknown"


class DeliveryKind(StrEnum):
    """``reply``: the run's final text; ``intent``: a message the agent's send tool queued; ``human``: a person's."""

    REPLY = "reply"
    INTENT = "intent"
    HUMAN = "human"  # a person's message after a handoff: no run (revision 0026)


class NotificationState(StrEnum):
    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"
    # The org has no outgoing webhook: nothing to send, recorded so a replay does not try again.
    SKIPPED = "skipped"


def org_webhook_aad(org_id: uuid.UUID, webhook_id: uuid.UUID) -> bytes:
    """Associated data of an org webhook's sealed secret: a ciphertext copied to another row does not open."""
    return f"org_webhooks.secret:{org_id}:{webhook_id}".encode()


class RunDelivery(UUIDPrimaryKey, OrgScoped, Timestamps, Base):
    """The at-most-once claim of one outbound message, committed before the channel is called."""

    __tablename__ = "run_deliveries"
    __table_args__ = (
        check_in("status", DeliveryState),
        check_in("kind", DeliveryKind),
        # The claim itself: a message is handed to a channel by at most one delivery row.
        UniqueConstraint("message_id"),
        CheckConstraint("attempts >= 0", name="attempts_non_negative"),
        CheckConstraint("run_id IS NOT NULL OR kind = 'human'", name="run_unless_human"),
        Index(None, "run_id", "kind"),
        Index(None, "org_id", "created_at"),
        # The claims in flight, for the notifier's sweep of stale ones (revisions 0020, 0040).
        Index(
            "ix_run_deliveries_open_updated_at",
            "updated_at",
            postgresql_where=text("status IN ('claimed', 'sending')"),
        ),
    )

    # The run whose reply or intent this is; NULL for a person's message (kind ``human``).
    run_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("ai_agent_runs.id", ondelete="CASCADE"))
    message_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("messages.id", ondelete="CASCADE"))
    kind: Mapped[str]
    # The channel plugin that sent it (``waha``...).
    channel: Mapped[str]
    status: Mapped[str] = mapped_column(server_default=text("'sending'"))
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    # The channel's id of the sent message.
    external_id: Mapped[str | None]
    # Stable code of the last failure (``http_400``, ``timeout``...) and a scrubbed, short message.
    error_code: Mapped[str | None]
    error_message: Mapped[str | None]
    completed_at: Mapped[datetime | None]


class OrgWebhook(UUIDPrimaryKey, OrgScoped, Timestamps, Base):
    """The org's outgoing webhook: where handoffs and budget incidents are announced (one per org)."""

    __tablename__ = "org_webhooks"
    __table_args__ = (
        UniqueConstraint("org_id"),
        CheckConstraint("octet_length(secret_iv) = 12", name="secret_iv_length"),
        CheckConstraint("octet_length(secret_tag) = 16", name="secret_tag_length"),
    )

    url: Mapped[str]
    # HMAC-SHA256 key of the signatures, AES-GCM sealed (``org_webhook_aad``); shown once when issued.
    secret_ciphertext: Mapped[bytes]
    secret_iv: Mapped[bytes]
    secret_tag: Mapped[bytes]
    secret_key_id: Mapped[str]
    created_by_user_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))


class OrgNotification(UUIDPrimaryKey, OrgScoped, Timestamps, Base):
    """One notification to the org's humans, once per ``dedupe_key`` (``handoff:<run>``, ``insight:<key>``)."""

    __tablename__ = "org_notifications"
    __table_args__ = (
        check_in("status", NotificationState),
        UniqueConstraint("org_id", "dedupe_key"),
        CheckConstraint("attempts >= 0", name="attempts_non_negative"),
        Index(None, "org_id", "created_at"),
        # The notifier's sweep of rows a crashed notifier left pending (revision 0022).
        Index("ix_org_notifications_pending_updated_at", "updated_at", postgresql_where=text("status = 'pending'")),
    )

    dedupe_key: Mapped[str]
    # ``conversation.handoff`` or ``budget.incident``.
    event_type: Mapped[str]
    # The id receivers deduplicate on (``X-Switchboard-Event-Id``): stable across re-sends.
    event_id: Mapped[uuid.UUID]
    status: Mapped[str] = mapped_column(server_default=text("'pending'"))
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    error_code: Mapped[str | None]
    payload: Mapped[dict[str, Any]] = mapped_column(server_default=text("'{}'::jsonb"))
    sent_at: Mapped[datetime | None]
