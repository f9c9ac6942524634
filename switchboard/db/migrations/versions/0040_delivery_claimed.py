"""A claim not yet attempted says so: ``run_deliveries.status = 'claimed'``.

Revision ID: 0040
Revises: 0039
Create Date: 2026-12-05

A run's messages are claimed together, before any is sent, and sent one after the other (the
ones after a message retried in the background wait behind it). Every claim was ``sending``
from the start, so a notifier that died with the first message on the wire left the others
``sending`` too, and they became ``unknown`` — "may have reached the customer", never sent —
although nothing had tried to send them. Now only the message about to be sent is
``sending``; the ones waiting their turn are ``claimed`` and move to ``sending`` just before
their attempt (one conditional update: two notifiers never both send one). A redelivered
record finds its ``claimed`` messages and sends them; a ``claimed`` row no redelivery will find
(it waited behind a retry whose notifier died) is failed by the sweep after
``NOTIFIER_STALE_CLAIM_S`` as ``interrupted_before_send`` — certainly not sent, so people may
send it again — and its message says ``failed`` in the inbox.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from switchboard.db import tenancy

revision: str = "0040"
down_revision: str | None = "0039"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "run_deliveries"
_CHECK = "ck_run_deliveries_status"
_OLD_STATES = ("sending", "sent", "failed", "unknown")
_NEW_STATES = ("claimed", *_OLD_STATES)
_OLD_INDEX = "ix_run_deliveries_sending_updated_at"
_NEW_INDEX = "ix_run_deliveries_open_updated_at"
_SETTING = tenancy.TENANT_SETTING
# The error of a claim the sweep failed before any attempt (services/notifier/store.py).
_NOT_ATTEMPTED = "interrupted_before_send"


def _function(open_states: str, claimed_part: str, counted: str) -> str:
    # Data-modifying CTEs run once each, whether the outer query reads them or not.
    return f"""
CREATE OR REPLACE FUNCTION expire_stale_deliveries(p_older_than_s integer)
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
        WHERE d.status IN ({open_states}) AND d.updated_at < v_before
    LOOP
        PERFORM set_config('{_SETTING}', v_org::text, true);
        WITH done AS (
            UPDATE public.run_deliveries AS d
            SET status = 'unknown', error_code = 'interrupted', updated_at = now()
            WHERE d.org_id = v_org AND d.status = 'sending' AND d.updated_at < v_before
            RETURNING d.message_id
        ), marked AS (
            UPDATE public.messages AS m SET delivery_status = 'unknown', updated_at = now()
            FROM done
            WHERE m.org_id = v_org AND m.id = done.message_id AND m.delivery_status = 'pending'
        ){claimed_part}
        SELECT {counted} INTO v_expired;
        v_total := v_total + v_expired;
    END LOOP;
    PERFORM set_config('{_SETTING}', v_caller, true);
    RETURN v_total;
END
$$
"""


_CLAIMED_PART = f""", not_attempted AS (
            UPDATE public.run_deliveries AS d
            SET status = 'failed', error_code = '{_NOT_ATTEMPTED}', completed_at = now(), updated_at = now()
            WHERE d.org_id = v_org AND d.status = 'claimed' AND d.updated_at < v_before
            RETURNING d.message_id
        ), failed AS (
            UPDATE public.messages AS m
            SET delivery_status = 'failed', delivery_error = '{_NOT_ATTEMPTED}', updated_at = now()
            FROM not_attempted
            WHERE m.org_id = v_org AND m.id = not_attempted.message_id AND m.delivery_status = 'pending'
        )"""


def _check(states: Sequence[str]) -> None:
    op.drop_constraint(op.f(_CHECK), _TABLE, type_="check")
    listed = ", ".join(f"'{s}'" for s in states)
    op.create_check_constraint(op.f(_CHECK), _TABLE, f"status IN ({listed})")


def upgrade() -> None:
    _check(_NEW_STATES)
    op.execute(f"DROP INDEX IF EXISTS {_OLD_INDEX}")
    op.execute(f"CREATE INDEX {_NEW_INDEX} ON {_TABLE} (updated_at) WHERE status IN ('claimed', 'sending')")
    counted = "(SELECT count(*) FROM done) + (SELECT count(*) FROM not_attempted)"
    op.execute(_function("'claimed', 'sending'", _CLAIMED_PART, counted))


def downgrade() -> None:
    # A claim waiting its turn was ``sending`` before this revision.
    op.execute(f"ALTER TABLE {_TABLE} NO FORCE ROW LEVEL SECURITY")
    op.execute(f"UPDATE {_TABLE} SET status = 'sending' WHERE status = 'claimed'")
    op.execute(f"ALTER TABLE {_TABLE} FORCE ROW LEVEL SECURITY")
    op.execute(_function("'sending'", "", "(SELECT count(*) FROM done)"))
    op.execute(f"DROP INDEX IF EXISTS {_NEW_INDEX}")
    op.execute(f"CREATE INDEX {_OLD_INDEX} ON {_TABLE} (updated_at) WHERE status = 'sending'")
    _check(_OLD_STATES)
