"""The dispatcher's database side: budget and rate-limit functions, decision idempotency.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

What the dispatcher (services/dispatcher, docs/dispatcher.md) asks PostgreSQL, all
through narrow SECURITY DEFINER functions because the questions span orgs:

- ``list_orgs_over_budget(month)``: which orgs reached their monthly token or cost
  cap (an enabled org-scope ``budget_policies`` row against ``workspace_token_usage``).
  Returns org ids and which cap, never figures or content. The owner role gets the
  SELECT-only ``owner_lookup`` policy on the two tables it reads.
- ``admit_org_runs(org, requested, window_s, default_limit)``: the per-org run rate
  limit, one atomic call per org per dispatch batch. A fixed-window counter in the
  platform table ``dispatch_rate_windows``, which only this function touches: the
  application role's privileges on it are revoked by the migration environment.

And the decision sink's idempotency: ``dispatch_decisions`` gets ``decision_id`` (the
record's event id), unique, instead of unique ``(dispatch_event_id, outcome)``,
because one dispatch may now carry the same outcome twice for real (deferred twice,
recovered at attempt 2 and 3). The outcome CHECK gains ``interrupted``, ``recovered``
and ``lost``.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from switchboard.db import tenancy

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen here on purpose: a revision keeps doing what it did when it was written.
_OUTCOMES_BEFORE = ("dispatched", "no_match", "conv_busy", "budget_exceeded", "rate_limited", "queued", "steered")
_OUTCOMES_AFTER = (*_OUTCOMES_BEFORE, "interrupted", "recovered", "lost")
_LOOKUP_TABLES = ("budget_policies", "workspace_token_usage")
_FUNCTION_SIGNATURES = (
    "list_orgs_over_budget(date)",
    "admit_org_runs(uuid, integer, integer, integer)",
)
_SEARCH_PATH = "SET search_path = pg_catalog, public, pg_temp"

_LIST_ORGS_OVER_BUDGET = f"""
CREATE FUNCTION list_orgs_over_budget(p_month date)
RETURNS TABLE (org_id uuid, exceeded text)
LANGUAGE sql STABLE SECURITY DEFINER {_SEARCH_PATH} AS $$
    SELECT p.org_id,
           CASE WHEN p.token_limit IS NOT NULL
                     AND coalesce(u.input_tokens + u.output_tokens, 0) >= p.token_limit
                THEN 'tokens' ELSE 'cost' END
    FROM public.budget_policies AS p
    LEFT JOIN public.workspace_token_usage AS u
           ON u.org_id = p.org_id AND u.month = date_trunc('month', p_month)::date
    WHERE p.scope = 'organization' AND p.agent_id IS NULL AND p.enabled
      AND (   (p.token_limit IS NOT NULL
               AND coalesce(u.input_tokens + u.output_tokens, 0) >= p.token_limit)
           OR (p.cost_limit_micros IS NOT NULL AND coalesce(u.cost_micros, 0) >= p.cost_limit_micros))
    ORDER BY p.org_id
$$
"""

# Fixed windows aligned on the epoch (so every worker agrees on the window without
# coordination); the org's own limit if the org exists, else the caller's default.
# INSERT ... ON CONFLICT DO NOTHING then SELECT ... FOR UPDATE serializes concurrent
# callers on the row, so the sum admitted in a window never exceeds the limit.
_ADMIT_ORG_RUNS = f"""
CREATE FUNCTION admit_org_runs(p_org_id uuid, p_requested integer, p_window_seconds integer,
                               p_default_limit integer)
RETURNS TABLE (admitted integer, window_ends_at timestamptz, limit_per_window integer)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER {_SEARCH_PATH} AS $$
DECLARE
    v_window integer := greatest(p_window_seconds, 1);
    v_start timestamptz := to_timestamp(floor(extract(epoch FROM clock_timestamp()) / v_window) * v_window);
    v_limit integer;
    v_used integer;
    v_grant integer;
BEGIN
    SELECT o.rate_limit_runs_per_minute INTO v_limit FROM public.organizations AS o WHERE o.id = p_org_id;
    v_limit := coalesce(v_limit, greatest(p_default_limit, 0));
    INSERT INTO public.dispatch_rate_windows (organization_id, window_start, admitted)
    VALUES (p_org_id, v_start, 0)
    ON CONFLICT (organization_id, window_start) DO NOTHING;
    SELECT w.admitted INTO v_used FROM public.dispatch_rate_windows AS w
    WHERE w.organization_id = p_org_id AND w.window_start = v_start
    FOR UPDATE;
    v_grant := least(greatest(p_requested, 0), greatest(v_limit - v_used, 0));
    IF v_grant > 0 THEN
        UPDATE public.dispatch_rate_windows AS w SET admitted = w.admitted + v_grant
        WHERE w.organization_id = p_org_id AND w.window_start = v_start;
    END IF;
    DELETE FROM public.dispatch_rate_windows AS w
    WHERE w.organization_id = p_org_id AND w.window_start < v_start;
    RETURN QUERY SELECT v_grant, v_start + make_interval(secs => v_window), v_limit;
END
$$
"""


def _outcome_check(values: Sequence[str]) -> str:
    return "outcome IN (" + ", ".join(f"'{v}'" for v in values) + ")"


def upgrade() -> None:
    op.add_column(
        "dispatch_decisions",
        sa.Column(
            "decision_id", postgresql.UUID(as_uuid=True), server_default=sa.text("gen_random_uuid()"), nullable=False
        ),
    )
    op.drop_constraint(op.f("uq_dispatch_decisions_dispatch_event_id_outcome"), "dispatch_decisions", type_="unique")
    op.create_unique_constraint(op.f("uq_dispatch_decisions_decision_id"), "dispatch_decisions", ["decision_id"])
    op.create_index(
        op.f("ix_dispatch_decisions_dispatch_event_id"), "dispatch_decisions", ["dispatch_event_id"], unique=False
    )
    op.drop_constraint(op.f("ck_dispatch_decisions_outcome"), "dispatch_decisions", type_="check")
    op.create_check_constraint(
        op.f("ck_dispatch_decisions_outcome"), "dispatch_decisions", _outcome_check(_OUTCOMES_AFTER)
    )

    op.create_table(
        "dispatch_rate_windows",
        sa.Column("organization_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("admitted", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.CheckConstraint("admitted >= 0", name=op.f("ck_dispatch_rate_windows_admitted_non_negative")),
        sa.PrimaryKeyConstraint("organization_id", "window_start", name=op.f("pk_dispatch_rate_windows")),
    )

    for table in _LOOKUP_TABLES:
        for statement in tenancy.owner_lookup_statements(table):
            op.execute(statement)
    op.execute(_LIST_ORGS_OVER_BUDGET)
    op.execute(_ADMIT_ORG_RUNS)
    # EXECUTE for the application role is granted by the migration env after every run.
    for signature in _FUNCTION_SIGNATURES:
        op.execute(f"REVOKE ALL ON FUNCTION {signature} FROM PUBLIC")


def downgrade() -> None:
    for signature in _FUNCTION_SIGNATURES:
        op.execute(f"DROP FUNCTION IF EXISTS {signature}")
    for table in _LOOKUP_TABLES:
        for statement in tenancy.drop_owner_lookup_statements(table):
            op.execute(statement)
    op.drop_table("dispatch_rate_windows")

    # Decisions the old CHECK and unique key cannot hold are dropped with the feature.
    op.execute(
        "DELETE FROM dispatch_decisions WHERE outcome NOT IN (" + ", ".join(f"'{v}'" for v in _OUTCOMES_BEFORE) + ")"
    )
    op.execute(
        "DELETE FROM dispatch_decisions AS d USING dispatch_decisions AS e"
        " WHERE d.dispatch_event_id = e.dispatch_event_id AND d.outcome = e.outcome"
        " AND (d.created_at, d.id) > (e.created_at, e.id)"
    )
    op.drop_constraint(op.f("ck_dispatch_decisions_outcome"), "dispatch_decisions", type_="check")
    op.create_check_constraint(
        op.f("ck_dispatch_decisions_outcome"), "dispatch_decisions", _outcome_check(_OUTCOMES_BEFORE)
    )
    op.drop_index(op.f("ix_dispatch_decisions_dispatch_event_id"), table_name="dispatch_decisions")
    op.drop_constraint(op.f("uq_dispatch_decisions_decision_id"), "dispatch_decisions", type_="unique")
    op.create_unique_constraint(
        op.f("uq_dispatch_decisions_dispatch_event_id_outcome"), "dispatch_decisions", ["dispatch_event_id", "outcome"]
    )
    op.drop_column("dispatch_decisions", "decision_id")
