"""Follow-ups agents schedule: a later wake-up of a conversation with reason ``followUp``."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, CheckConstraint, ForeignKey, Index, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from switchboard.db.base import Base, OrgScoped, Timestamps, UUIDPrimaryKey, check_in
from switchboard.db.enums import FollowupStatus


class ScheduledFollowup(UUIDPrimaryKey, OrgScoped, Timestamps, Base):
    """A promised callback: at ``due_at`` the scheduler wakes the conversation's agent.

    ``idempotency_key`` lets a tool call that is retried schedule only once.
    """

    __tablename__ = "scheduled_followups"
    __table_args__ = (
        check_in("status", FollowupStatus),
        UniqueConstraint("org_id", "idempotency_key"),
        CheckConstraint("status <> 'fired' OR fired_at IS NOT NULL", name="fired_has_timestamp"),
        CheckConstraint("status <> 'cancelled' OR cancelled_at IS NOT NULL", name="cancelled_has_timestamp"),
        # The scheduler's scan: due follow-ups still waiting.
        Index(
            "ix_scheduled_followups_due",
            "due_at",
            postgresql_where=text("status = 'scheduled'"),
        ),
        Index(None, "org_id", "status", "due_at"),
        Index(None, "conversation_id", "status"),
    )

    conversation_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))
    contact_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("contacts.id", ondelete="SET NULL"), index=True)
    # The agent to wake; NULL = whichever published agent matches at due time.
    agent_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("ai_agents.id", ondelete="SET NULL"), index=True)
    # The run that scheduled it (NULL when a person did).
    created_by_run_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("ai_agent_runs.id", ondelete="SET NULL"), index=True
    )
    created_by_user_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    # Scheduled by an action the owner approved (it carries the proposing run's id all the same):
    # a recovery attempt withdraws the follow-ups its lost parent scheduled, never these.
    approved: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    due_at: Mapped[datetime]
    reason: Mapped[str]
    # Extra wake context handed to the woken run.
    context: Mapped[dict[str, Any]] = mapped_column(server_default=text("'{}'::jsonb"))
    idempotency_key: Mapped[str | None]
    status: Mapped[str] = mapped_column(server_default=text("'scheduled'"))
    fired_at: Mapped[datetime | None]
    # The run the follow-up woke, once fired.
    fired_run_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("ai_agent_runs.id", ondelete="SET NULL"))
    cancelled_at: Mapped[datetime | None]
    error: Mapped[str | None]
