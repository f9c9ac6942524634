"""An outbound message whose send's outcome is unknown says so: ``delivery_status = 'unknown'``.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-03

A claim the notifier could not finish (a stop cut its retries short, or a crash left it
``sending`` and the sweep of revision 0020 expired it) becomes ``unknown`` on
``run_deliveries``: an attempt may have reached the channel, so it is never sent again. The
message row stayed ``pending``, and the inbox showed a message "about to be sent" forever.
Now the message is ``unknown`` too, in the same statement; a later receipt from the channel
(the message did arrive) still advances it to ``delivered`` or ``read``, since ``unknown`` is
not on the progress ladder of the receipts (services/api/webhooks/repository.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from switchboard.db import tenancy

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CHECK = "ck_messages_delivery_status"
_OLD = ("received", "pending", "sent", "delivered", "read", "failed")
_NEW = (*_OLD, "unknown")
_SETTING = tenancy.TENANT_SETTING


def _function(mark_messages: bool) -> str:
    # Data-modifying CTEs run once each, whether the outer query reads them or not.
    marked = (
        """, marked AS (
            UPDATE public.messages AS m SET delivery_status = 'unknown', updated_at = now()
            FROM done
            WHERE m.org_id = v_org AND m.id = done.message_id AND m.delivery_status = 'pending'
        )"""
        if mark_messages
        else ""
    )
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
        WHERE d.status = 'sending' AND d.updated_at < v_before
    LOOP
        PERFORM set_config('{_SETTING}', v_org::text, true);
        WITH done AS (
            UPDATE public.run_deliveries AS d
            SET status = 'unknown', error_code = 'interrupted', updated_at = now()
            WHERE d.org_id = v_org AND d.status = 'sending' AND d.updated_at < v_before
            RETURNING d.message_id
        ){marked}
        SELECT count(*) INTO v_expired FROM done;
        v_total := v_total + v_expired;
    END LOOP;
    PERFORM set_config('{_SETTING}', v_caller, true);
    RETURN v_total;
END
$$
"""


def _check(values: Sequence[str]) -> None:
    op.drop_constraint(op.f(_CHECK), "messages", type_="check")
    listed = ", ".join(f"'{v}'" for v in values)
    op.create_check_constraint(op.f(_CHECK), "messages", f"delivery_status IN ({listed})")


def upgrade() -> None:
    _check(_NEW)
    op.execute(_function(mark_messages=True))


def downgrade() -> None:
    # Every org's rows: the owner is subject to the tables' forced row-level security.
    op.execute("ALTER TABLE messages NO FORCE ROW LEVEL SECURITY")
    op.execute("UPDATE messages SET delivery_status = 'pending' WHERE delivery_status = 'unknown'")
    op.execute("ALTER TABLE messages FORCE ROW LEVEL SECURITY")
    _check(_OLD)
    op.execute(_function(mark_messages=False))
