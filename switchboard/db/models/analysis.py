"""The daily analysis fan-out's claims: one row per org and org-local day (docs/analysis.md)."""

from __future__ import annotations

import uuid
from datetime import date, datetime

from sqlalchemy import CheckConstraint, Date, ForeignKey
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Mapped, mapped_column

from switchboard.db.base import Base, OrgScoped


class AnalysisClaim(OrgScoped, Base):
    """The org's analysis of ``day`` was dispatched; the primary key makes it once per org and day."""

    __tablename__ = "analysis_claims"
    __table_args__ = (CheckConstraint("agents_dispatched >= 0", name="agents_dispatched_nonnegative"),)

    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"), primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    # The internal analysis conversation the runs were dispatched on (None: no analysis agent that day).
    conversation_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="SET NULL"), index=True
    )
    agents_dispatched: Mapped[int] = mapped_column(server_default=sql_text("0"))
    claimed_at: Mapped[datetime] = mapped_column(server_default=sql_text("now()"))
