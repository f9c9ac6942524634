"""What the brief keeps besides the digest itself: the per-day facts it recomputes the
digest from, and the owner's ``/todo`` items (docs/brief.md)."""

from __future__ import annotations

import uuid
from datetime import date, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import CheckConstraint, Date, ForeignKey, Index
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Mapped, mapped_column

from switchboard.db.base import Base, CreatedAt, OrgScoped, UUIDPrimaryKey, check_in, updated_at_column


class BriefFactKind(StrEnum):
    RUN = "run"
    HANDOFF = "handoff"
    INSIGHT = "insight"


class TodoSource(StrEnum):
    SLASH_COMMAND = "slash_command"
    API = "api"


class TodoStatus(StrEnum):
    OPEN = "open"
    DONE = "done"


class BriefFact(OrgScoped, Base):
    """One consumed run, handoff or insight, on the org-local day it belongs to.

    Keyed by (org, kind, fact key) — the run id, or the insight key — so a redelivered
    or replayed record updates the same row instead of counting twice.
    """

    __tablename__ = "brief_facts"
    __table_args__ = (
        check_in("kind", BriefFactKind),
        CheckConstraint("jsonb_typeof(payload) = 'object'", name="payload_object"),
        Index(None, "org_id", "day"),
        # The carry-over's questions (revision 0025): runs that proposed an action, insights.
        Index(
            "ix_brief_facts_proposing_runs",
            "org_id",
            "day",
            postgresql_where=sql_text(
                "kind = 'run' AND jsonb_array_length(COALESCE(payload -> 'proposed', '[]'::jsonb)) > 0"
            ),
        ),
        Index("ix_brief_facts_insights", "org_id", "day", postgresql_where=sql_text("kind = 'insight'")),
    )

    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"), primary_key=True)
    kind: Mapped[str] = mapped_column(primary_key=True)
    fact_key: Mapped[str] = mapped_column(primary_key=True)
    day: Mapped[date] = mapped_column(Date)
    # When the fact happened (the record's time): the newest record of an insight wins.
    occurred_at: Mapped[datetime]
    payload: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(server_default=sql_text("now()"))
    updated_at: Mapped[datetime] = updated_at_column()


class WorkspaceTodo(UUIDPrimaryKey, OrgScoped, CreatedAt, Base):
    """An item of the owner's own to-do list (``/todo <text>`` or the API), shown in the digest."""

    __tablename__ = "workspace_todos"
    __table_args__ = (
        check_in("source", TodoSource),
        check_in("status", TodoStatus),
        CheckConstraint("(status = 'done') = (done_at IS NOT NULL)", name="done_has_timestamp"),
        CheckConstraint("length(text) BETWEEN 1 AND 2000", name="text_length"),
        Index(None, "org_id", "status", "created_at"),
    )

    text: Mapped[str]
    source: Mapped[str]
    conversation_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="SET NULL"), index=True
    )
    status: Mapped[str] = mapped_column(server_default=sql_text("'open'"))
    done_at: Mapped[datetime | None]
