"""Usage ledger: runs append their usage, a fold moves it into the monthly counters.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-01

Before this revision every run's finish transaction incremented the org's row in
``workspace_token_usage`` and the agent's row in ``agent_usage_monthly``. All runs of an
org therefore queued on one row lock, held from the increment to the commit; under load
(200 runs/s of one org) that lock, not the work, set the runner's throughput (measured:
the increment waited 0.6 s on average, and the conversation row locked earlier in the
same transaction blocked the next webhook of that conversation meanwhile).

- ``usage_entries``: one row per run (or thread summary), appended by the run's own
  transaction — an insert takes no shared lock. A tenant table under forced RLS; the owner
  role may read it (``owner_lookup``) to find which orgs have entries.
- ``fold_usage_entries(limit)``: SECURITY DEFINER, called by every runner every
  ``RUNNER_USAGE_FOLD_S``. Per org with entries it scopes itself to that org
  (``app.org_id``, the caller's value restored before it returns), deletes up to ``limit`` entries
  ``FOR UPDATE SKIP LOCKED`` (concurrent folders take disjoint entries) and adds their sums
  to the monthly counters in the same statement: an entry is counted exactly once, and a
  crash before commit leaves it for the next fold.
- ``list_orgs_over_budget(month)`` now adds the entries not folded yet, like every other
  reader (``switchboard.db.usage``).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from switchboard.db import tenancy

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "usage_entries"
_FOLD = "fold_usage_entries(integer)"
_SEARCH_PATH = "SET search_path = pg_catalog, public, pg_temp"

# The caller's tenant setting is restored before returning, so the per-org scoping below never
# leaks into the caller's transaction. (A function-level SET of a placeholder setting would need
# superuser on PostgreSQL 15.)
_FOLD_SQL = f"""
CREATE FUNCTION fold_usage_entries(p_limit integer)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER {_SEARCH_PATH} AS $$
DECLARE
    v_caller text := coalesce(current_setting('{tenancy.TENANT_SETTING}', true), '');
    v_org uuid;
    v_folded integer;
    v_total integer := 0;
BEGIN
    FOR v_org IN SELECT DISTINCT e.org_id FROM public.usage_entries AS e LOOP
        PERFORM set_config('{tenancy.TENANT_SETTING}', v_org::text, true);
        WITH picked AS (
            DELETE FROM public.usage_entries AS e
            WHERE e.id IN (
                SELECT x.id FROM public.usage_entries AS x
                WHERE x.org_id = v_org
                ORDER BY x.id
                LIMIT greatest(p_limit, 1)
                FOR UPDATE SKIP LOCKED
            )
            RETURNING e.org_id, e.agent_id, e.month, e.input_tokens, e.output_tokens, e.cost_micros, e.run_count
        ), org_rows AS (
            INSERT INTO public.workspace_token_usage AS u
                (org_id, month, input_tokens, output_tokens, cost_micros, run_count)
            SELECT p.org_id, p.month, sum(p.input_tokens)::bigint, sum(p.output_tokens)::bigint,
                   sum(p.cost_micros)::bigint, sum(p.run_count)::bigint
            FROM picked AS p GROUP BY p.org_id, p.month
            ON CONFLICT (org_id, month) DO UPDATE SET
                input_tokens = u.input_tokens + excluded.input_tokens,
                output_tokens = u.output_tokens + excluded.output_tokens,
                cost_micros = u.cost_micros + excluded.cost_micros,
                run_count = u.run_count + excluded.run_count,
                updated_at = now()
        ), agent_rows AS (
            INSERT INTO public.agent_usage_monthly AS a
                (org_id, agent_id, month, input_tokens, output_tokens, cost_micros, run_count)
            SELECT p.org_id, p.agent_id, p.month, sum(p.input_tokens)::bigint, sum(p.output_tokens)::bigint,
                   sum(p.cost_micros)::bigint, sum(p.run_count)::bigint
            FROM picked AS p WHERE p.agent_id IS NOT NULL GROUP BY p.org_id, p.agent_id, p.month
            ON CONFLICT (agent_id, month) DO UPDATE SET
                input_tokens = a.input_tokens + excluded.input_tokens,
                output_tokens = a.output_tokens + excluded.output_tokens,
                cost_micros = a.cost_micros + excluded.cost_micros,
                run_count = a.run_count + excluded.run_count,
                updated_at = now()
        )
        -- Data-modifying CTEs always run to completion, read or not.
        SELECT count(*) INTO v_folded FROM picked;
        v_total := v_total + v_folded;
    END LOOP;
    PERFORM set_config('{tenancy.TENANT_SETTING}', v_caller, true);
    RETURN v_total;
END
$$
"""

_OVER_BUDGET = "list_orgs_over_budget(date)"


def _over_budget_sql(*, with_entries: bool) -> str:
    """The dispatcher's budget question (revision 0008), optionally counting unfolded entries."""
    pending = (
        """
    LEFT JOIN (
        SELECT e.org_id, sum(e.input_tokens + e.output_tokens) AS tokens, sum(e.cost_micros) AS cost
        FROM public.usage_entries AS e
        WHERE e.month = date_trunc('month', p_month)::date
        GROUP BY e.org_id
    ) AS q ON q.org_id = p.org_id"""
        if with_entries
        else ""
    )
    tokens = "coalesce(u.input_tokens + u.output_tokens, 0)" + (" + coalesce(q.tokens, 0)" if with_entries else "")
    cost = "coalesce(u.cost_micros, 0)" + (" + coalesce(q.cost, 0)" if with_entries else "")
    return f"""
CREATE OR REPLACE FUNCTION list_orgs_over_budget(p_month date)
RETURNS TABLE (org_id uuid, exceeded text)
LANGUAGE sql STABLE SECURITY DEFINER {_SEARCH_PATH} AS $$
    SELECT p.org_id,
           CASE WHEN p.token_limit IS NOT NULL AND {tokens} >= p.token_limit
                THEN 'tokens' ELSE 'cost' END
    FROM public.budget_policies AS p
    LEFT JOIN public.workspace_token_usage AS u
           ON u.org_id = p.org_id AND u.month = date_trunc('month', p_month)::date{pending}
    WHERE p.scope = 'organization' AND p.agent_id IS NULL AND p.enabled
      AND (   (p.token_limit IS NOT NULL AND {tokens} >= p.token_limit)
           OR (p.cost_limit_micros IS NOT NULL AND {cost} >= p.cost_limit_micros))
    ORDER BY p.org_id
$$
"""


def upgrade() -> None:
    op.create_table(
        _TABLE,
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("agent_id", sa.UUID(), nullable=True),
        sa.Column("month", sa.Date(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_micros", sa.BigInteger(), nullable=False),
        sa.Column("run_count", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("month = date_trunc('month', month)::date", name=op.f("ck_usage_entries_month_first_day")),
        *(
            sa.CheckConstraint(f"{c} >= 0", name=op.f(f"ck_usage_entries_{c}_non_negative"))
            for c in ("input_tokens", "output_tokens", "cost_micros", "run_count")
        ),
        sa.ForeignKeyConstraint(
            ["agent_id"], ["ai_agents.id"], name=op.f("fk_usage_entries_agent_id_ai_agents"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["org_id"], ["organizations.id"], name=op.f("fk_usage_entries_org_id_organizations"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_usage_entries")),
    )
    op.create_index(op.f("ix_usage_entries_org_id_month"), _TABLE, ["org_id", "month"], unique=False)
    op.create_index(op.f("ix_usage_entries_agent_id"), _TABLE, ["agent_id"], unique=False)
    for statement in (*tenancy.enable_rls_statements(_TABLE), *tenancy.owner_lookup_statements(_TABLE)):
        op.execute(statement)
    op.execute(_FOLD_SQL)
    op.execute(_over_budget_sql(with_entries=True))
    # EXECUTE for the application role is granted by the migration env after every run.
    op.execute(f"REVOKE ALL ON FUNCTION {_FOLD} FROM PUBLIC")


def downgrade() -> None:
    # Entries not folded yet are folded first: the counters lose nothing with the ledger.
    op.execute("SELECT fold_usage_entries(2147483647)")
    op.execute(_over_budget_sql(with_entries=False))
    op.execute(f"DROP FUNCTION IF EXISTS {_FOLD}")
    op.drop_table(_TABLE)
