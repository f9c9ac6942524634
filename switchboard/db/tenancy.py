"""The single source of truth for tenant isolation: which tables are tenant
tables, the row-level security policy they carry, and a check of a live database.

A table is a tenant table when it has an ``org_id`` column (plus
``organizations`` itself, keyed on ``id``). Every other table must be listed in
``GLOBAL_TABLES`` on purpose; the unit tests fail when a table is in neither.

How isolation works (see docs/database.md):

- Each transaction of the application states its tenant with
  ``SELECT set_config('app.org_id', <uuid>, true)`` (``session.tenant_transaction``).
- Each tenant table has ``ENABLE`` + ``FORCE ROW LEVEL SECURITY`` and one policy
  ``tenant_isolation`` comparing the row's org to that setting, for reads
  (USING) and writes (WITH CHECK). No setting -> no rows, never all rows.
- The application role is neither the owner nor BYPASSRLS, so it cannot opt out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from sqlalchemy import Connection, MetaData, text

from switchboard.db.base import ORG_ID_COLUMN, Base

# The transaction-local setting that names the current tenant.
TENANT_SETTING: Final = "app.org_id"
# The policy every tenant table carries.
TENANT_POLICY: Final = "tenant_isolation"
# SELECT-only policy for the owner role on the tables the SECURITY DEFINER lookups read.
OWNER_LOOKUP_POLICY: Final = "owner_lookup"

# The tenant itself: its row is keyed on ``id`` rather than ``org_id``.
ORG_TABLE: Final = "organizations"

# Tables shared by all tenants, deliberately without row-level security:
# - users: one identity may be a member of several organizations;
# - ai_models: the model catalog and its prices are the same for everyone;
# - outbox: a platform queue drained in global order by the relay (docs/database.md);
# - dispatch_rate_windows: the per-org run rate counter, reachable only through the
#   SECURITY DEFINER function admit_org_runs (the application role has no privilege on it).
# - login_failures: the sign-in throttle's window, keyed by email and address (no org is known yet).
GLOBAL_TABLES: Final[frozenset[str]] = frozenset(
    {"users", "ai_models", "outbox", "dispatch_rate_windows", "login_failures"}
)

# Tables read by the SECURITY DEFINER lookup functions (switchboard.db.lookups): they answer
# the few questions asked before a tenant is known (which org owns this token? this session?),
# and the dispatcher's cross-org questions (which orgs are over their monthly budget?).
LOOKUP_TABLES: Final[frozenset[str]] = frozenset(
    {
        "organizations",
        "memberships",
        "api_tokens",
        "channel_sessions",
        "scheduled_followups",
        "budget_policies",
        "workspace_token_usage",
        "usage_entries",  # fold_usage_entries and list_orgs_over_budget: which orgs have usage to fold
        "run_deliveries",  # expire_stale_deliveries: which orgs have claims left sending
        "analysis_claims",  # list_due_analyses: which org-local days are claimed (docs/analysis.md)
        "workspace_daily_briefs",  # list_orgs_missing_digest: whose local day has no digest yet (docs/brief.md)
        "org_notifications",  # list_pending_notifications: what a crashed notifier left unsent (docs/notifier.md)
        "org_webhooks",  # list_due_digests: which orgs can be told their morning digest (docs/notifier.md)
        "ai_agent_runs",  # list_stale_runs: runs whose runner died (docs/runner.md)
    }
)

# The current tenant as SQL. NULLIF: after a transaction-local setting ends, PostgreSQL
# leaves the placeholder defined as '' for the rest of the session, and ''::uuid would raise.
CURRENT_ORG_SQL: Final = f"NULLIF(current_setting('{TENANT_SETTING}', true), '')::uuid"


def tenant_tables(metadata: MetaData) -> frozenset[str]:
    """Tables with an ``org_id`` column, plus ``organizations``."""
    names = {t.name for t in metadata.tables.values() if ORG_ID_COLUMN in t.columns}
    if ORG_TABLE in metadata.tables:
        names.add(ORG_TABLE)
    return frozenset(names)


def _load_models() -> MetaData:
    import switchboard.db.models  # noqa: F401 - registers every table on Base.metadata

    return Base.metadata


TENANT_TABLES: Final[frozenset[str]] = tenant_tables(_load_models())


def tenant_key_column(table: str) -> str:
    """The column the policy compares with the current tenant."""
    return "id" if table == ORG_TABLE else ORG_ID_COLUMN


def _quote(identifier: str) -> str:
    if not identifier.replace("_", "").isalnum():
        raise ValueError(f"unexpected identifier {identifier!r}")
    return f'"{identifier}"'


def enable_rls_statements(table: str) -> list[str]:
    """DDL that puts ``table`` under tenant isolation (used by migrations)."""
    t, key = _quote(table), _quote(tenant_key_column(table))
    return [
        f"ALTER TABLE {t} ENABLE ROW LEVEL SECURITY",
        f"ALTER TABLE {t} FORCE ROW LEVEL SECURITY",
        f"CREATE POLICY {TENANT_POLICY} ON {t} AS PERMISSIVE FOR ALL"
        f" USING ({key} = {CURRENT_ORG_SQL}) WITH CHECK ({key} = {CURRENT_ORG_SQL})",
    ]


def disable_rls_statements(table: str) -> list[str]:
    """The inverse of ``enable_rls_statements`` (used by downgrades)."""
    t = _quote(table)
    return [
        f"DROP POLICY IF EXISTS {TENANT_POLICY} ON {t}",
        f"ALTER TABLE {t} NO FORCE ROW LEVEL SECURITY",
        f"ALTER TABLE {t} DISABLE ROW LEVEL SECURITY",
    ]


def owner_lookup_statements(table: str) -> list[str]:
    """Let the owner role (the migration role, which owns the lookup functions) read ``table``.

    ``TO CURRENT_USER`` resolves to the role running the migration; the
    application role is not that role, so its view of the table is unchanged.
    """
    return [
        f"CREATE POLICY {OWNER_LOOKUP_POLICY} ON {_quote(table)} AS PERMISSIVE FOR SELECT TO CURRENT_USER USING (true)"
    ]


def drop_owner_lookup_statements(table: str) -> list[str]:
    return [f"DROP POLICY IF EXISTS {OWNER_LOOKUP_POLICY} ON {_quote(table)}"]


def rls_problems(connection: Connection, expected: Iterable[str] = TENANT_TABLES) -> list[str]:
    """What is wrong with row-level security in the connected database; empty when all is well.

    Checks that exactly the expected tables have RLS enabled and forced, and
    that each carries the ``tenant_isolation`` policy for all commands.
    """
    expected_set = set(expected)
    rows = connection.execute(
        text(
            """
            SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,
                   EXISTS (SELECT 1 FROM pg_policy p
                           WHERE p.polrelid = c.oid AND p.polname = :policy
                             AND p.polcmd = '*' AND p.polpermissive) AS has_policy
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
            """
        ),
        {"policy": TENANT_POLICY},
    ).all()
    problems: list[str] = []
    present = {r.relname for r in rows}
    for missing in sorted(expected_set - present):
        problems.append(f"tenant table {missing} does not exist")
    for r in rows:
        if r.relname in expected_set:
            if not (r.relrowsecurity and r.relforcerowsecurity):
                problems.append(f"{r.relname}: row-level security not enabled and forced")
            if not r.has_policy:
                problems.append(f"{r.relname}: no {TENANT_POLICY} policy")
        elif r.relrowsecurity or r.relforcerowsecurity:
            problems.append(f"{r.relname}: row-level security on a table that is not a tenant table")
    return problems
