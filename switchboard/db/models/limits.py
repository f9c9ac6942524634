"""Platform counters behind the dispatcher's limits.

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

from sqlalchemy import CheckConstraint, Integer, text
from sqlalchemy.orm import Mapped, mapped_column

from switchboard.db.base import Base


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
