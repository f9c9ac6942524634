"""What the workspace (organization) lets agents do and what they found [000]:
monthly usage, proposed/executed actions, autonomy per area, insights, Home."""

from __future__ import annotations

import uuid
from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Date,
    ForeignKey,
    Index,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from switchboard.db.base import (
    Base,
    OrgScoped,
    Timestamps,
    UUIDPrimaryKey,
    check_in,
    check_non_negative,
)
from switchboard.db.enums import (
    AutonomyMode,
    DecisionStatus,
    InsightKind,
    InsightSeverity,
    InsightStatus,
)

# Business areas ("planets") are slugs: crm, booking, sales, marketing, ... or "cross".
_AREA_CHECK = "area ~ '^[a-z][a-z0-9_]{0,63}$'"
_FIRST_OF_MONTH = "month = date_trunc('month', month)::date"


class WorkspaceTokenUsage(OrgScoped, Base):
    """Tokens and spend of an org per calendar month, folded from ``usage_entries``.

    ``month`` is the first day of the month (UTC). Read it with ``switchboard.db.usage.month_totals``
    (which adds the entries not folded yet).
    """

    __tablename__ = "workspace_token_usage"
    __table_args__ = (
        CheckConstraint(_FIRST_OF_MONTH, name="month_first_day"),
        *check_non_negative("input_tokens", "output_tokens", "cost_micros", "run_count"),
    )

    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"), primary_key=True)
    month: Mapped[date] = mapped_column(Date, primary_key=True)
    input_tokens: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    output_tokens: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    cost_micros: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    run_count: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    updated_at: Mapped[datetime] = mapped_column(server_default=text("now()"))


class AgentUsageMonthly(OrgScoped, Base):
    """Per agent and month: the figure agent budgets are evaluated against [002]."""

    __tablename__ = "agent_usage_monthly"
    __table_args__ = (
        CheckConstraint(_FIRST_OF_MONTH, name="month_first_day"),
        *check_non_negative("input_tokens", "output_tokens", "cost_micros", "run_count"),
        Index(None, "org_id", "month"),
    )

    agent_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("ai_agents.id", ondelete="CASCADE"), primary_key=True)
    month: Mapped[date] = mapped_column(Date, primary_key=True)
    input_tokens: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    output_tokens: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    cost_micros: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    run_count: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    updated_at: Mapped[datetime] = mapped_column(server_default=text("now()"))


class UsageEntry(OrgScoped, Base):
    """One run's (or summary's) usage, waiting to be folded into the monthly counters.

    Appending here instead of incrementing ``workspace_token_usage`` and
    ``agent_usage_monthly`` inside the run's own transaction keeps every run of
    an org from queueing on the same two rows (docs/database.md "Usage ledger").
    ``fold_usage_entries()`` moves entries into the counters; readers add the
    entries not folded yet (``switchboard.db.usage``).
    """

    __tablename__ = "usage_entries"
    __table_args__ = (
        CheckConstraint(_FIRST_OF_MONTH, name="month_first_day"),
        *check_non_negative("input_tokens", "output_tokens", "cost_micros", "run_count"),
        Index(None, "org_id", "month"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    # NULL: usage that belongs to the org only (a thread summary), not to an agent's budget.
    agent_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("ai_agents.id", ondelete="CASCADE"), index=True)
    month: Mapped[date] = mapped_column(Date)
    input_tokens: Mapped[int] = mapped_column(BigInteger)
    output_tokens: Mapped[int] = mapped_column(BigInteger)
    cost_micros: Mapped[int] = mapped_column(BigInteger)
    run_count: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(server_default=text("now()"))


class AgentDecision(UUIDPrimaryKey, OrgScoped, Timestamps, Base):
    """A write action an agent proposed or executed, and what the owner decided [000 §3-4].

    Three approvals of the same ``action_type`` let the Home suggest promoting
    that area to ``auto`` (3-approval-promote).
    """

    __tablename__ = "agent_decisions"
    __table_args__ = (
        check_in("status", DecisionStatus),
        check_in("autonomy_tier", AutonomyMode),
        CheckConstraint(_AREA_CHECK, name="area_format"),
        CheckConstraint("status <> 'executed' OR executed_at IS NOT NULL", name="executed_has_timestamp"),
        CheckConstraint(
            "status NOT IN ('approved', 'rejected') OR decided_at IS NOT NULL",
            name="decided_has_timestamp",
        ),
        Index(None, "org_id", "status", "created_at"),
        Index(None, "org_id", "action_type", "status"),
    )

    run_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("ai_agent_runs.id", ondelete="SET NULL"), index=True)
    agent_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("ai_agents.id", ondelete="SET NULL"), index=True)
    area: Mapped[str]
    # The tool / action kind ("send_reminder"), the unit of 3-approval-promote.
    action_type: Mapped[str]
    proposed_action: Mapped[dict[str, Any]]
    # The autonomy mode of the area when the agent acted.
    autonomy_tier: Mapped[str]
    status: Mapped[str] = mapped_column(server_default=text("'proposed'"))
    rationale: Mapped[str | None]
    decided_by: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    decided_at: Mapped[datetime | None]
    executed_at: Mapped[datetime | None]
    execution_result: Mapped[dict[str, Any] | None]


class WorkspaceAutonomy(OrgScoped, Base):
    """Autonomy per org and business area: off / propose (default) / auto.

    The org-wide kill switch lives on ``organizations.autonomy_kill_switch`` and wins.
    """

    __tablename__ = "workspace_autonomy"
    __table_args__ = (
        check_in("mode", AutonomyMode),
        CheckConstraint(_AREA_CHECK, name="area_format"),
    )

    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"), primary_key=True)
    area: Mapped[str] = mapped_column(primary_key=True)
    mode: Mapped[str] = mapped_column(server_default=text("'propose'"))
    # The per-area kill switch (migration 0013): forces the area off and keeps ``mode`` for later.
    kill_switch: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    updated_by: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(server_default=text("now()"))
    updated_at: Mapped[datetime] = mapped_column(server_default=text("now()"), onupdate=text("now()"))


class WorkspaceActionAutonomy(OrgScoped, Base):
    """One action type's own mode, overriding its area's (migration 0035) [000 §3, 3-approval-promote].

    Accepting the Home's "promote" card makes *that* action type ``auto`` — approving three
    follow-ups must not let agents send WhatsApp messages of the same area unasked. An owner may
    also keep one action type on ``propose`` in an ``auto`` area. Never ``off``: an area that is
    off, or a kill switch, wins over any row here (``switchboard.autonomy.AutonomySettings``).
    """

    __tablename__ = "workspace_action_autonomy"
    __table_args__ = (
        CheckConstraint("mode IN ('propose', 'auto')", name="mode"),
        CheckConstraint("action_type ~ '^[a-z][a-z0-9_]{0,127}$'", name="action_type_format"),
    )

    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"), primary_key=True)
    action_type: Mapped[str] = mapped_column(primary_key=True)
    mode: Mapped[str]
    updated_by: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(server_default=text("now()"))
    updated_at: Mapped[datetime] = mapped_column(server_default=text("now()"), onupdate=text("now()"))


class WorkspaceInsight(UUIDPrimaryKey, OrgScoped, Timestamps, Base):
    """Something an analysis found, or an action it proposes, deduplicated per org.

    Re-running the analysis upserts on (org_id, dedupe_key) and keeps the
    status the owner set (see ``switchboard.db.insights.upsert_insight``).
    """

    __tablename__ = "workspace_insights"
    __table_args__ = (
        UniqueConstraint("org_id", "dedupe_key"),
        check_in("kind", InsightKind),
        check_in("severity", InsightSeverity),
        check_in("status", InsightStatus),
        CheckConstraint(_AREA_CHECK, name="area_format"),
        CheckConstraint("jsonb_typeof(suggested_actions) = 'array'", name="suggested_actions_array"),
        Index(None, "org_id", "status", "insight_date"),
    )

    dedupe_key: Mapped[str]
    area: Mapped[str]
    kind: Mapped[str] = mapped_column(server_default=text("'insight'"))
    severity: Mapped[str] = mapped_column(server_default=text("'info'"))
    title: Mapped[str]
    body: Mapped[str | None]
    suggested_actions: Mapped[list[Any]] = mapped_column(server_default=text("'[]'::jsonb"))
    # The day (org time zone) the insight was last produced for.
    insight_date: Mapped[date] = mapped_column(Date, server_default=text("CURRENT_DATE"))
    agent_decision_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("agent_decisions.id", ondelete="SET NULL"), index=True
    )
    run_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("ai_agent_runs.id", ondelete="SET NULL"), index=True)
    status: Mapped[str] = mapped_column(server_default=text("'new'"))
    status_changed_at: Mapped[datetime | None]
    status_changed_by: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))


class WorkspaceHomePrefs(OrgScoped, Base):
    """How the org's Home digest is laid out: pinned sections and areas."""

    __tablename__ = "workspace_home_prefs"

    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"), primary_key=True)
    pinned_sections: Mapped[list[str]] = mapped_column(server_default=text("'{}'::text[]"))
    pinned_areas: Mapped[list[str]] = mapped_column(server_default=text("'{}'::text[]"))
    prefs: Mapped[dict[str, Any]] = mapped_column(server_default=text("'{}'::jsonb"))
    updated_at: Mapped[datetime] = mapped_column(server_default=text("now()"), onupdate=text("now()"))


class WorkspaceDailyBrief(OrgScoped, Base):
    """The materialized Home digest of one org and day, written by services/brief.

    The API serves it as stored; it is never recomputed on each request.
    """

    __tablename__ = "workspace_daily_briefs"
    __table_args__ = (CheckConstraint("jsonb_typeof(digest) = 'object'", name="digest_object"),)

    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"), primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    # {"pulse": ..., "done": [...], "todo": [...], "planets": [...]}
    digest: Mapped[dict[str, Any]]
    updated_at: Mapped[datetime] = mapped_column(server_default=text("now()"), onupdate=text("now()"))
