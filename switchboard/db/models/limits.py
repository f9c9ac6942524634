"""Platform counters behind the dispatcher's limits, and the sign-in throttle's failures.

``dispatch_rate_windows`` is the fixed-window counter of the per-org run rate limit
[004 D7]. It is a platform table, not a tenant table: only the SECURITY DEFINER
function ``admit_org_runs`` (migration 0008, wrapped by
``switchboard.db.lookups.admit_org_runs``) reads and writes it, and the application
role holds no privilege on it at all. The org column is deliberately *not* named
``org_id``: that name is what makes a table a tenant table under row-level security
(``switchboard.db.tenancy``), and a counter that every dispatcher worker bumps for any
org in one atomic call must not depend on a tenant setting.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import CheckConstraint, DateTime, Index, Integer, text
from sqlalchemy.orm import Mapped, mapped_column

from switchboard.db.base import Base, UUIDPrimaryKey


class DispatchRateWindow(Base):
    """Runs admitted for one org in one fixed window (the function keeps one row per org)."""

    __tablename__ = "dispatch_rate_windows"
    __table_args__ = (CheckConstraint("admitted >= 0", name="admitted_non_negative"),)

    # The organization (no foreign key: a counter must not block deleting an org, and the
    # function prunes an org's old windows on each call).
    organization_id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    # Start of the window: epoch seconds rounded down to a multiple of the window length.
    window_start: Mapped[datetime] = mapped_column(primary_key=True)
    admitted: Mapped[int] = mapped_column(Integer, server_default=text("0"))


class LoginFailure(UUIDPrimaryKey, Base):
    """One failed sign-in (a wrong password or second factor), kept for the throttle's window.

    A platform table like ``users``: a sign-in happens before any organization is known. It
    holds the lower-cased email (the same as ``users.email``, already a global table) and the
    client address — never a password or a code. Rows older than a day are pruned by the
    writer (``services/api/identity/throttle.py``)."""

    __tablename__ = "login_failures"
    __table_args__ = (
        Index(None, "email_key", "created_at"),
        Index(None, "client_address", "created_at"),
        Index(None, "created_at"),
    )

    email_key: Mapped[str]
    client_address: Mapped[str]
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=text("now()"))
