"""Stale delivery claims: the notifier's sweep marks claims left ``sending`` as ``unknown``.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-01

The notifier retries a failed send in the background and commits the record's offset at
once (services/notifier/retries.py), so a notifier that crashes during a retry's backoff
leaves its claim ``sending`` and no redelivery will find it. Every notifier calls
``expire_stale_deliveries(older_than_s)`` every ``NOTIFIER_SWEEP_INTERVAL_S``: org by org
(scoping itself with ``app.org_id``, the caller's value restored before it returns) it sets
claims ``sending`` for longer than ``older_than_s`` to ``unknown`` — the honest state of "an
attempt may have reached the channel", never sent again. The owner role may read
``run_deliveries`` (``owner_lookup``) to find which orgs have such claims; a partial index
keeps that scan to the claims in flight.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from switchboard.db import tenancy

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "run_deliveries"
_INDEX = "ix_run_deliveries_sending_updated_at"
_FUNCTION = "expire_stale_deliveries(integer)"
_SETTING = tenancy.TENANT_SETTING

_FUNCTION_SQL = f"""
CREATE FUNCTION expire_stale_deliveries(p_older_than_s integer)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    v_caller text := coalesce(current_setting('{_SETTING}', true), '');
    v_before timestamptz := now() - make_interval(secs => greatest(p_older_than_s, 0));
    v_org uuid;
    v_expired integer;
    v_total integer := 0;
BEGIN
    FOR v_org IN
        SELECT DISTINCT d.org_id FROM public.run_deliveries AS d
        WHERE d.status = 'sending' AND d.updated_at < v_before
    LOOP
        PERFORM set_config('{_SETTING}', v_org::text, true);
        UPDATE public.run_deliveries AS d
        SET status = 'unknown', error_code = 'interrupted', updated_at = now()
        WHERE d.org_id = v_org AND d.status = 'sending' AND d.updated_at < v_before;
        GET DIAGNOSTICS v_expired = ROW_COUNT;
        v_total := v_total + v_expired;
    END LOOP;
    PERFORM set_config('{_SETTING}', v_caller, true);
    RETURN v_total;
END
$$
"""


def upgrade() -> None:
    op.execute(f"CREATE INDEX {_INDEX} ON {_TABLE} (updated_at) WHERE status = 'sending'")
    for statement in tenancy.owner_lookup_statements(_TABLE):
        op.execute(statement)
    op.execute(_FUNCTION_SQL)
    # EXECUTE for the application role is granted by the migration env after every run.
    op.execute(f"REVOKE ALL ON FUNCTION {_FUNCTION} FROM PUBLIC")


def downgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {_FUNCTION}")
    for statement in tenancy.drop_owner_lookup_statements(_TABLE):
        op.execute(statement)
    op.execute(f"DROP INDEX IF EXISTS {_INDEX}")
