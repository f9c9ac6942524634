"""Budgets after the fact [002 "I budget, a posteriori"]: caps per org or agent and
month, and the incidents recorded when a run's spend crosses them."""

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
    Integer,
    func,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from switchboard.db.base import (
    Base,
    CreatedAt,
    OrgScoped,
    Timestamps,
    UUIDPrimaryKey,
    check_in,
    check_non_negative,
)
from switchboard.db.enums import BudgetAction, BudgetScope, IncidentSeverity

# Stand-in for "no agent" in unique indexes, so org-scope rows are unique too.
_NO_AGENT = "'00000000-0000-0000-0000-000000000000'::uuid"
# The same as an expression, for ``ON CONFLICT`` targets that must name the index's expression.
NO_AGENT_SQL = text(_NO_AGENT)


class BudgetPolicy(UUIDPrimaryKey, OrgScoped, Timestamps, Base):
    """A monthly cap for the whole org (checked before dispatch) or one agent (after each run).

    NULL limits mean "no cap on that dimension"; a set limit is > 0. Crossing
    ``soft_threshold_pct`` of a limit records a warning; reaching it records a
    hard incident and applies ``hard_action`` (an agent's: ``pause_agent`` or ``notify``;
    the org's is ``block_dispatch``, which the dispatcher does before dispatch).
    """

    __tablename__ = "budget_policies"
    __table_args__ = (
        check_in("scope", BudgetScope),
        check_in("hard_action", BudgetAction),
        CheckConstraint("(scope = 'agent') = (agent_id IS NOT NULL)", name="agent_iff_agent_scope"),
        CheckConstraint("token_limit IS NULL OR token_limit > 0", name="token_limit_positive"),
        CheckConstraint("cost_limit_micros IS NULL OR cost_limit_micros > 0", name="cost_limit_positive"),
        CheckConstraint("soft_threshold_pct BETWEEN 1 AND 100", name="soft_threshold_range"),
        # One policy per org, one per agent.
        Index(
            "uq_budget_policies_one_per_subject",
            "org_id",
            func.coalesce(text("agent_id"), text(_NO_AGENT)),
            unique=True,
        ),
        Index(None, "agent_id"),
    )

    scope: Mapped[str]
    agent_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("ai_agents.id", ondelete="CASCADE"))
    token_limit: Mapped[int | None] = mapped_column(BigInteger)
    cost_limit_micros: Mapped[int | None] = mapped_column(BigInteger)
    soft_threshold_pct: Mapped[int] = mapped_column(Integer, server_default=text("80"))
    hard_action: Mapped[str] = mapped_column(server_default=text("'notify'"))
    enabled: Mapped[bool] = mapped_column(Boolean, server_default=text("true"))
    created_by: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))


class BudgetIncident(UUIDPrimaryKey, OrgScoped, CreatedAt, Base):
    """A budget crossing, recorded once per subject, month and severity.

    The evaluator inserts with ``ON CONFLICT DO NOTHING``, so re-evaluating
    after every run of the month does not pile up duplicates.
    """

    __tablename__ = "budget_incidents"
    __table_args__ = (
        check_in("scope", BudgetScope),
        check_in("severity", IncidentSeverity),
        check_in("action_taken", BudgetAction),
        CheckConstraint("(scope = 'agent') = (agent_id IS NOT NULL)", name="agent_iff_agent_scope"),
        CheckConstraint("period_month = date_trunc('month', period_month)::date", name="month_first_day"),
        *check_non_negative("spent_micros", "spent_tokens"),
        Index(
            "uq_budget_incidents_once_per_subject_month_severity",
            "org_id",
            func.coalesce(text("agent_id"), text(_NO_AGENT)),
            "period_month",
            "severity",
            unique=True,
        ),
        Index(None, "org_id", "created_at"),
        Index(None, "agent_id"),
    )

    scope: Mapped[str]
    policy_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("budget_policies.id", ondelete="SET NULL"), index=True
    )
    agent_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("ai_agents.id", ondelete="CASCADE"))
    # The run whose completion crossed the threshold.
    run_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("ai_agent_runs.id", ondelete="SET NULL"), index=True)
    severity: Mapped[str]
    period_month: Mapped[date] = mapped_column(Date)
    spent_micros: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    limit_micros: Mapped[int | None] = mapped_column(BigInteger)
    spent_tokens: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    limit_tokens: Mapped[int | None] = mapped_column(BigInteger)
    action_taken: Mapped[str] = mapped_column(server_default=text("'notify'"))
    details: Mapped[dict[str, Any]] = mapped_column(server_default=text("'{}'::jsonb"))
    notified_at: Mapped[datetime | None]
    resolved_at: Mapped[datetime | None]
    resolved_by: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
