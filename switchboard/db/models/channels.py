"""Where conversations happen: channel sessions (a WhatsApp number), contacts,
conversations and their messages."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, CheckConstraint, ForeignKey, Index, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from switchboard.db.base import Base, OrgScoped, Timestamps, UUIDPrimaryKey, check_in
from switchboard.db.enums import (
    ChannelProvider,
    ChannelSessionStatus,
    ConversationStatus,
    MessageContentType,
    MessageDeliveryStatus,
    MessageDirection,
    MessageSender,
)

E164_PATTERN = r"^\+[1-9][0-9]{6,14}$"


def _sealed_checks(prefix: str) -> tuple[CheckConstraint, ...]:
    """An AES-GCM sealed value is all four columns or none, with a 12-byte IV and 16-byte tag."""
    parts = [f"{prefix}_{c}" for c in ("ciphertext", "iv", "tag", "key_id")]
    complete = " AND ".join(f"({parts[0]} IS NULL) = ({p} IS NULL)" for p in parts[1:])
    return (
        CheckConstraint(complete, name=f"{prefix}_complete"),
        CheckConstraint(f"{prefix}_iv IS NULL OR octet_length({prefix}_iv) = 12", name=f"{prefix}_iv_length"),
        CheckConstraint(f"{prefix}_tag IS NULL OR octet_length({prefix}_tag) = 16", name=f"{prefix}_tag_length"),
    )


class ChannelSession(UUIDPrimaryKey, OrgScoped, Timestamps, Base):
    """One connected number on a channel provider (a WAHA session)."""

    __tablename__ = "channel_sessions"
    __table_args__ = (
        check_in("provider", ChannelProvider),
        check_in("status", ChannelSessionStatus),
        CheckConstraint(f"phone_number IS NULL OR phone_number ~ '{E164_PATTERN}'", name="phone_e164"),
        # The name-routed webhook URL names the session: among the sessions it routes, the
        # pair leads to exactly one org (revision 0027; the per-session URL needs no name).
        # Replies go out by name on the session's WAHA server (NULL: the platform's): a name is
        # unique per server, or two orgs would send through one number (revision 0029).
        Index(
            "uq_channel_sessions_server_name",
            "provider",
            text("coalesce(base_url, '')"),
            "external_session",
            unique=True,
            postgresql_where=text("archived_at IS NULL"),  # an archived session frees its name (0038)
        ),
        Index(
            "uq_channel_sessions_routing_name",
            "provider",
            "external_session",
            unique=True,
            postgresql_where=text("routes_by_name"),
        ),
        Index(None, "org_id", "created_at"),
        *_sealed_checks("webhook_secret"),
        *_sealed_checks("api_key"),
    )

    provider: Mapped[str] = mapped_column(server_default=text("'waha'"))
    # The provider's own name for the session (WAHA "session"), as sent in webhooks.
    external_session: Mapped[str]
    # Whether the name-routed webhook URL routes this session (its name was free when it was
    # created); every session is routed by its own URL, /api/v1/webhooks/waha/{id}.
    routes_by_name: Mapped[bool] = mapped_column(server_default=text("false"))
    label: Mapped[str]
    phone_number: Mapped[str | None]
    status: Mapped[str] = mapped_column(server_default=text("'starting'"))
    # When WAHA made the ``session.status`` report the status came from (its clock): an older
    # report arriving later (a retried delivery, a replay) changes nothing (revision 0041).
    status_reported_at: Mapped[datetime | None]
    # The provider endpoint for this session; NULL means the platform's configured default.
    base_url: Mapped[str | None]
    # Whether a message typed on the business's phone (not one Switchboard sent) takes the
    # conversation over from the agents (revision 0032).
    owner_replies_take_over: Mapped[bool] = mapped_column(server_default=text("true"))
    # Archived (revision 0038): kept for the conversations that name it, routes nothing, frees its name.
    archived_at: Mapped[datetime | None]
    # HMAC key the provider signs webhooks with, AES-GCM sealed (associated data binds it to
    # this row). NULL: no secret yet, so every webhook for the session is refused.
    webhook_secret_ciphertext: Mapped[bytes | None]
    webhook_secret_iv: Mapped[bytes | None]
    webhook_secret_tag: Mapped[bytes | None]
    webhook_secret_key_id: Mapped[str | None]
    webhook_secret_rotated_at: Mapped[datetime | None]
    # The provider's API key for outbound sends (WAHA ``X-Api-Key``), sealed the same way; optional.
    api_key_ciphertext: Mapped[bytes | None]
    api_key_iv: Mapped[bytes | None]
    api_key_tag: Mapped[bytes | None]
    api_key_key_id: Mapped[str | None]


class Contact(UUIDPrimaryKey, OrgScoped, Timestamps, Base):
    """A customer the organization talks to, identified by the channel's chat id."""

    __tablename__ = "contacts"
    __table_args__ = (
        UniqueConstraint("org_id", "external_id"),
        CheckConstraint(f"phone_number IS NULL OR phone_number ~ '{E164_PATTERN}'", name="phone_e164"),
    )

    # The channel's id of the person (WhatsApp: "5511999999999@c.us").
    external_id: Mapped[str]
    display_name: Mapped[str | None]
    phone_number: Mapped[str | None]
    email: Mapped[str | None]
    attributes: Mapped[dict[str, Any]] = mapped_column(server_default=text("'{}'::jsonb"))
    # Set when the contact's personal data was erased (revision 0034): the row stays for the runs.
    erased_at: Mapped[datetime | None]


class Conversation(UUIDPrimaryKey, OrgScoped, Timestamps, Base):
    """One chat on one channel session; at most one active agent run at a time."""

    __tablename__ = "conversations"
    __table_args__ = (
        check_in("status", ConversationStatus),
        UniqueConstraint("channel_session_id", "chat_id"),
        Index(None, "org_id", "last_message_at"),
    )

    channel_session_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("channel_sessions.id", ondelete="RESTRICT"))
    # NULL for group chats, which have no single contact.
    contact_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("contacts.id", ondelete="SET NULL"), index=True)
    chat_id: Mapped[str]
    is_group: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    status: Mapped[str] = mapped_column(server_default=text("'open'"))
    # The human who took the conversation over after a handoff.
    assigned_user_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    handoff_at: Mapped[datetime | None]
    last_message_at: Mapped[datetime | None]
    # Rolling thread summary fed to the prompt's memory layer.
    summary: Mapped[str | None]

    messages: Mapped[list[Message]] = relationship(back_populates="conversation", lazy="raise", passive_deletes=True)


class Message(UUIDPrimaryKey, OrgScoped, Timestamps, Base):
    """A message in or out. Ingest is idempotent on (channel_session_id, external_id)."""

    __tablename__ = "messages"
    __table_args__ = (
        check_in("direction", MessageDirection),
        check_in("sender", MessageSender),
        check_in("content_type", MessageContentType),
        check_in("delivery_status", MessageDeliveryStatus),
        UniqueConstraint("channel_session_id", "external_id"),
        # The notifier's idempotency key ("reply of run X"): a reply is recorded once.
        UniqueConstraint("channel_session_id", "dedupe_key"),
        Index(None, "conversation_id", "occurred_at"),
        Index(None, "org_id", "created_at"),
    )

    conversation_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))
    channel_session_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("channel_sessions.id", ondelete="RESTRICT"))
    direction: Mapped[str]
    sender: Mapped[str]
    # The channel's message id; NULL for an outbound message not yet accepted by the channel.
    external_id: Mapped[str | None]
    dedupe_key: Mapped[str | None]
    body: Mapped[str] = mapped_column(server_default=text("''"))
    content_type: Mapped[str] = mapped_column(server_default=text("'text'"))
    from_me: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    delivery_status: Mapped[str] = mapped_column(server_default=text("'received'"))
    delivery_error: Mapped[str | None]
    # The run that produced an outbound message (FK added after ai_agent_runs exists).
    run_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("ai_agent_runs.id", ondelete="SET NULL", use_alter=True), index=True
    )
    # The human who typed an outbound message, when one did.
    sent_by_user_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    # When the channel says the message happened (not when we stored it).
    occurred_at: Mapped[datetime] = mapped_column(server_default=text("now()"))
    attributes: Mapped[dict[str, Any]] = mapped_column(server_default=text("'{}'::jsonb"))

    conversation: Mapped[Conversation] = relationship(back_populates="messages", lazy="raise")
