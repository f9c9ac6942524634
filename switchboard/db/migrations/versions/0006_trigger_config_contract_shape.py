"""Store ``ai_agent_versions.trigger_config`` in the shape of the ``published`` contract.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30

The seed's default was nested (``{"events", "filters": {"ignore_self", ...}}``
[004 §3.2]); the Avro ``TriggerConfig`` that the dispatcher reads is flat
(``event_types``, ``ignore_groups``, ``ignore_own``, ``keyword_regex``,
``business_hours``). One shape from the API body to the database to the event
means nothing is renamed on the way. Existing rows are rewritten; the table's
forced row-level security is lifted for that one statement (inside this
migration's transaction) because the owner sees no tenant's rows otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FLAT_DEFAULT = (
    '\'{"event_types": ["message"], "ignore_groups": true, "ignore_own": true,'
    ' "keyword_regex": null, "business_hours": null}\'::jsonb'
)
NESTED_DEFAULT = (
    '\'{"events": ["message"], "filters": {"ignore_groups": true, "ignore_self": true,'
    ' "keyword_regex": null, "business_hours": null}}\'::jsonb'
)

TO_FLAT = """
UPDATE ai_agent_versions SET trigger_config = jsonb_build_object(
    'event_types', COALESCE(trigger_config -> 'events', '["message"]'::jsonb),
    'ignore_groups', COALESCE(trigger_config -> 'filters' -> 'ignore_groups', 'true'::jsonb),
    'ignore_own', COALESCE(trigger_config -> 'filters' -> 'ignore_self', 'true'::jsonb),
    'keyword_regex', COALESCE(trigger_config -> 'filters' -> 'keyword_regex', 'null'::jsonb),
    'business_hours', COALESCE(trigger_config -> 'filters' -> 'business_hours', 'null'::jsonb)
)
WHERE trigger_config ? 'events' OR trigger_config ? 'filters'
"""

TO_NESTED = """
UPDATE ai_agent_versions SET trigger_config = jsonb_build_object(
    'events', COALESCE(trigger_config -> 'event_types', '["message"]'::jsonb),
    'filters', jsonb_build_object(
        'ignore_groups', COALESCE(trigger_config -> 'ignore_groups', 'true'::jsonb),
        'ignore_self', COALESCE(trigger_config -> 'ignore_own', 'true'::jsonb),
        'keyword_regex', COALESCE(trigger_config -> 'keyword_regex', 'null'::jsonb),
        'business_hours', COALESCE(trigger_config -> 'business_hours', 'null'::jsonb)
    )
)
WHERE trigger_config ? 'event_types'
"""


def _rewrite(statement: str) -> None:
    op.execute("ALTER TABLE ai_agent_versions NO FORCE ROW LEVEL SECURITY")
    op.execute(statement)
    op.execute("ALTER TABLE ai_agent_versions FORCE ROW LEVEL SECURITY")


def upgrade() -> None:
    op.execute(f"ALTER TABLE ai_agent_versions ALTER COLUMN trigger_config SET DEFAULT {FLAT_DEFAULT}")
    _rewrite(TO_FLAT)


def downgrade() -> None:
    op.execute(f"ALTER TABLE ai_agent_versions ALTER COLUMN trigger_config SET DEFAULT {NESTED_DEFAULT}")
    _rewrite(TO_NESTED)
