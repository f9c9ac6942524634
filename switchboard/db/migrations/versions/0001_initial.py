"""Initial schema: every table of SPEC §3, row-level security, lookup functions.

Revision ID: 0001
Revises:
Create Date: 2026-11-30

Generated with ``alembic revision --autogenerate`` against the models, then
edited: the two foreign keys that close a cycle are added after all tables,
and row-level security, the owner lookup policies and the SECURITY DEFINER
lookup functions are added explicitly. Downgrade drops everything.
"""

# ruff: noqa: E501 - generated table definitions are kept one column per line

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from switchboard.db import tenancy

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Tables in creation order (dependencies first); the downgrade drops them in reverse.
CREATION_ORDER: tuple[str, ...] = (
    "ai_models",
    "outbox",
    "users",
    "organizations",
    "ai_agents",
    "ai_provider_credentials",
    "api_tokens",
    "audit_log",
    "channel_sessions",
    "contacts",
    "memberships",
    "workspace_autonomy",
    "workspace_daily_briefs",
    "workspace_home_prefs",
    "workspace_token_usage",
    "agent_usage_monthly",
    "ai_agent_versions",
    "budget_policies",
    "conversations",
    "messages",
    "ai_agent_runs",
    "dispatch_decisions",
    "agent_decisions",
    "budget_incidents",
    "scheduled_followups",
    "workspace_insights",
)

# Tenant tables created by this revision. Frozen here on purpose: a revision must
# keep doing what it did when it was written. Later tables get their RLS in their
# own revision; the environment checks the result against tenancy.TENANT_TABLES.
TENANT_TABLES: tuple[str, ...] = (
    "organizations",
    "memberships",
    "api_tokens",
    "channel_sessions",
    "contacts",
    "conversations",
    "messages",
    "ai_agents",
    "ai_agent_versions",
    "ai_provider_credentials",
    "ai_agent_runs",
    "dispatch_decisions",
    "workspace_token_usage",
    "agent_usage_monthly",
    "agent_decisions",
    "workspace_autonomy",
    "workspace_insights",
    "workspace_home_prefs",
    "workspace_daily_briefs",
    "budget_policies",
    "budget_incidents",
    "scheduled_followups",
    "audit_log",
)

# Tables the lookup functions below read as their owner (SELECT-only policy for that role).
LOOKUP_TABLES: tuple[str, ...] = (
    "organizations",
    "memberships",
    "api_tokens",
    "channel_sessions",
    "scheduled_followups",
)

LOOKUP_FUNCTION_SIGNATURES: tuple[str, ...] = (
    "lookup_api_token(bytea)",
    "lookup_user_memberships(uuid)",
    "lookup_channel_session(text, text)",
    "list_organization_ids()",
    "list_due_followups(timestamptz, integer)",
)

# Narrow SECURITY DEFINER functions for the questions asked before the tenant is known
# (switchboard.db.lookups). Each returns routing facts for one exact key, never content;
# search_path is pinned so a caller cannot shadow the tables they read.
_DEFINER = "LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp"
LOOKUP_FUNCTIONS_SQL: tuple[str, ...] = (
    f"""
    CREATE FUNCTION lookup_api_token(p_token_hash bytea)
    RETURNS TABLE (token_id uuid, org_id uuid, user_id uuid, role text, expires_at timestamptz)
    {_DEFINER} AS $$
        SELECT t.id, t.org_id, t.user_id, t.role, t.expires_at
        FROM public.api_tokens AS t
        WHERE t.token_hash = p_token_hash
          AND t.revoked_at IS NULL
          AND (t.expires_at IS NULL OR t.expires_at > now())
    $$
    """,
    f"""
    CREATE FUNCTION lookup_user_memberships(p_user_id uuid)
    RETURNS TABLE (org_id uuid, org_name text, org_slug text, role text)
    {_DEFINER} AS $$
        SELECT o.id, o.name, o.slug, m.role
        FROM public.memberships AS m JOIN public.organizations AS o ON o.id = m.org_id
        WHERE m.user_id = p_user_id
        ORDER BY o.name
    $$
    """,
    f"""
    CREATE FUNCTION lookup_channel_session(p_provider text, p_external_session text)
    RETURNS TABLE (channel_session_id uuid, org_id uuid, status text)
    {_DEFINER} AS $$
        SELECT s.id, s.org_id, s.status
        FROM public.channel_sessions AS s
        WHERE s.provider = p_provider AND s.external_session = p_external_session
    $$
    """,
    f"""
    CREATE FUNCTION list_organization_ids()
    RETURNS SETOF uuid
    {_DEFINER} AS $$
        SELECT o.id FROM public.organizations AS o ORDER BY o.created_at, o.id
    $$
    """,
    f"""
    CREATE FUNCTION list_due_followups(p_until timestamptz, p_limit integer)
    RETURNS TABLE (followup_id uuid, org_id uuid, due_at timestamptz)
    {_DEFINER} AS $$
        SELECT f.id, f.org_id, f.due_at
        FROM public.scheduled_followups AS f
        WHERE f.status = 'scheduled' AND f.due_at <= p_until
        ORDER BY f.due_at, f.id
        LIMIT greatest(p_limit, 0)
    $$
    """,
    # Only roles granted EXECUTE (the application role, by the environment) may call them.
    *(f"REVOKE ALL ON FUNCTION {signature} FROM PUBLIC" for signature in LOOKUP_FUNCTION_SIGNATURES),
)


def upgrade() -> None:
    op.create_table(
        "ai_models",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("provider", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("display_name", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("context_window", sa.Integer(), nullable=True),
        sa.Column("input_price_micros_per_mtok", sa.BigInteger(), nullable=True),
        sa.Column("output_price_micros_per_mtok", sa.BigInteger(), nullable=True),
        sa.Column("supports_tools", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("is_default", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("deprecated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "attributes", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("provider IN ('anthropic', 'openai', 'google', 'demo')", name=op.f("ck_ai_models_provider")),
        sa.CheckConstraint(
            "context_window IS NULL OR context_window > 0", name=op.f("ck_ai_models_context_window_positive")
        ),
        sa.CheckConstraint(
            "input_price_micros_per_mtok >= 0", name=op.f("ck_ai_models_input_price_micros_per_mtok_non_negative")
        ),
        sa.CheckConstraint(
            "output_price_micros_per_mtok >= 0", name=op.f("ck_ai_models_output_price_micros_per_mtok_non_negative")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ai_models")),
        sa.UniqueConstraint("provider", "model", name=op.f("uq_ai_models_provider_model")),
    )
    op.create_index(
        "uq_ai_models_one_default_per_provider",
        "ai_models",
        ["provider"],
        unique=True,
        postgresql_where=sa.text("is_default"),
    )
    op.create_table(
        "outbox",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("key", sa.LargeBinary(), nullable=True),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column(
            "headers", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("jsonb_typeof(headers) = 'object'", name=op.f("ck_outbox_headers_object")),
        sa.CheckConstraint("attempts >= 0", name=op.f("ck_outbox_attempts_non_negative")),
        sa.CheckConstraint("char_length(topic) BETWEEN 1 AND 249", name=op.f("ck_outbox_topic_length")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
    )
    op.create_index(
        "ix_outbox_published_at",
        "outbox",
        ["published_at"],
        unique=False,
        postgresql_where=sa.text("published_at IS NOT NULL"),
    )
    op.create_index(
        "ix_outbox_unpublished", "outbox", ["id"], unique=False, postgresql_where=sa.text("published_at IS NULL")
    )
    op.create_table(
        "users",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("email", sa.Text(), nullable=False),
        sa.Column("display_name", sa.Text(), nullable=True),
        sa.Column("password_hash", sa.Text(), nullable=True),
        sa.Column("mfa_totp_ciphertext", sa.LargeBinary(), nullable=True),
        sa.Column("mfa_totp_iv", sa.LargeBinary(), nullable=True),
        sa.Column("mfa_totp_tag", sa.LargeBinary(), nullable=True),
        sa.Column("mfa_totp_key_id", sa.Text(), nullable=True),
        sa.Column("mfa_enabled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_login_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("position('@' in email) > 1", name=op.f("ck_users_email_format")),
        sa.CheckConstraint(
            "(mfa_totp_ciphertext IS NULL) = (mfa_totp_iv IS NULL) AND (mfa_totp_ciphertext IS NULL) = (mfa_totp_tag IS NULL) AND (mfa_totp_ciphertext IS NULL) = (mfa_totp_key_id IS NULL)",
            name=op.f("ck_users_mfa_totp_complete"),
        ),
        sa.CheckConstraint(
            "mfa_totp_iv IS NULL OR octet_length(mfa_totp_iv) = 12", name=op.f("ck_users_mfa_totp_iv_length")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
    )
    op.create_index("uq_users_email_lower", "users", [sa.literal_column("lower(email)")], unique=True)
    op.create_table(
        "organizations",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("slug", sa.Text(), nullable=False),
        sa.Column("time_zone", sa.Text(), server_default=sa.text("'UTC'"), nullable=False),
        sa.Column("rate_limit_runs_per_minute", sa.Integer(), server_default=sa.text("60"), nullable=False),
        sa.Column("autonomy_kill_switch", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("autonomy_kill_switch_changed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("autonomy_kill_switch_changed_by", sa.UUID(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("slug ~ '^[a-z0-9][a-z0-9-]{1,62}$'", name=op.f("ck_organizations_slug_format")),
        sa.CheckConstraint("char_length(name) BETWEEN 1 AND 200", name=op.f("ck_organizations_name_length")),
        sa.CheckConstraint("rate_limit_runs_per_minute > 0", name=op.f("ck_organizations_rate_limit_positive")),
        sa.ForeignKeyConstraint(
            ["autonomy_kill_switch_changed_by"],
            ["users.id"],
            name=op.f("fk_organizations_autonomy_kill_switch_changed_by_users"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_organizations")),
        sa.UniqueConstraint("slug", name=op.f("uq_organizations_slug")),
    )
    op.create_table(
        "ai_agents",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("kind", sa.Text(), server_default=sa.text("'mcp_agent'"), nullable=False),
        sa.Column("priority", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("published_version_id", sa.UUID(), nullable=True),
        sa.Column("paused_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("pause_reason", sa.Text(), nullable=True),
        sa.Column("archived_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("monthly_budget_micros", sa.BigInteger(), nullable=True),
        sa.Column("created_by", sa.UUID(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("kind IN ('rag_bot', 'mcp_agent')", name=op.f("ck_ai_agents_kind")),
        sa.CheckConstraint("pause_reason IN ('manual', 'budget_exhausted')", name=op.f("ck_ai_agents_pause_reason")),
        sa.CheckConstraint("(paused_at IS NULL) = (pause_reason IS NULL)", name=op.f("ck_ai_agents_pause_consistent")),
        sa.CheckConstraint("char_length(name) BETWEEN 1 AND 200", name=op.f("ck_ai_agents_name_length")),
        sa.CheckConstraint(
            "monthly_budget_micros IS NULL OR monthly_budget_micros > 0",
            name=op.f("ck_ai_agents_monthly_budget_positive"),
        ),
        sa.ForeignKeyConstraint(
            ["created_by"], ["users.id"], name=op.f("fk_ai_agents_created_by_users"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["org_id"], ["organizations.id"], name=op.f("fk_ai_agents_org_id_organizations"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ai_agents")),
    )
    op.create_index(
        "ix_ai_agents_dispatch_candidates",
        "ai_agents",
        ["org_id", "priority", "created_at"],
        unique=False,
        postgresql_where=sa.text("published_version_id IS NOT NULL AND archived_at IS NULL"),
    )
    op.create_index(op.f("ix_ai_agents_org_id_created_at"), "ai_agents", ["org_id", "created_at"], unique=False)
    op.create_table(
        "ai_provider_credentials",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("provider", sa.Text(), nullable=False),
        sa.Column("label", sa.Text(), nullable=False),
        sa.Column("ciphertext", sa.LargeBinary(), nullable=False),
        sa.Column("iv", sa.LargeBinary(), nullable=False),
        sa.Column("tag", sa.LargeBinary(), nullable=False),
        sa.Column("key_id", sa.Text(), nullable=False),
        sa.Column("last4", sa.Text(), nullable=False),
        sa.Column("validation_status", sa.Text(), server_default=sa.text("'pending'"), nullable=False),
        sa.Column("validated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("validation_error", sa.Text(), nullable=True),
        sa.Column("models_available", postgresql.ARRAY(sa.Text()), nullable=True),
        sa.Column("is_active", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("is_default", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("created_by", sa.UUID(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "provider IN ('anthropic', 'openai', 'google')", name=op.f("ck_ai_provider_credentials_provider")
        ),
        sa.CheckConstraint(
            "validation_status IN ('pending', 'valid', 'invalid', 'error')",
            name=op.f("ck_ai_provider_credentials_validation_status"),
        ),
        sa.CheckConstraint(
            "char_length(key_id) BETWEEN 1 AND 64", name=op.f("ck_ai_provider_credentials_key_id_length")
        ),
        sa.CheckConstraint("char_length(last4) BETWEEN 1 AND 4", name=op.f("ck_ai_provider_credentials_last4_length")),
        sa.CheckConstraint("octet_length(ciphertext) > 0", name=op.f("ck_ai_provider_credentials_ciphertext_present")),
        sa.CheckConstraint("octet_length(iv) = 12", name=op.f("ck_ai_provider_credentials_iv_length")),
        sa.CheckConstraint("octet_length(tag) = 16", name=op.f("ck_ai_provider_credentials_tag_length")),
        sa.ForeignKeyConstraint(
            ["created_by"], ["users.id"], name=op.f("fk_ai_provider_credentials_created_by_users"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_ai_provider_credentials_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ai_provider_credentials")),
        sa.UniqueConstraint(
            "org_id", "provider", "label", name=op.f("uq_ai_provider_credentials_org_id_provider_label")
        ),
    )
    op.create_index(
        "uq_ai_provider_credentials_one_default_per_provider",
        "ai_provider_credentials",
        ["org_id", "provider"],
        unique=True,
        postgresql_where=sa.text("is_default AND is_active"),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("token_prefix", sa.Text(), nullable=False),
        sa.Column("token_hash", sa.LargeBinary(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("user_id", sa.UUID(), nullable=True),
        sa.Column("created_by", sa.UUID(), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("role IN ('viewer', 'manager', 'admin')", name=op.f("ck_api_tokens_role")),
        sa.CheckConstraint(
            "char_length(token_prefix) BETWEEN 1 AND 16", name=op.f("ck_api_tokens_token_prefix_length")
        ),
        sa.CheckConstraint(
            "expires_at IS NULL OR expires_at > created_at", name=op.f("ck_api_tokens_expires_after_created")
        ),
        sa.CheckConstraint("octet_length(token_hash) = 32", name=op.f("ck_api_tokens_token_hash_sha256")),
        sa.ForeignKeyConstraint(
            ["created_by"], ["users.id"], name=op.f("fk_api_tokens_created_by_users"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["org_id"], ["organizations.id"], name=op.f("fk_api_tokens_org_id_organizations"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_api_tokens_user_id_users"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    op.create_index(op.f("ix_api_tokens_org_id_created_at"), "api_tokens", ["org_id", "created_at"], unique=False)
    op.create_index(op.f("ix_api_tokens_user_id"), "api_tokens", ["user_id"], unique=False)
    op.create_table(
        "audit_log",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("actor_kind", sa.Text(), server_default=sa.text("'user'"), nullable=False),
        sa.Column("actor_user_id", sa.UUID(), nullable=True),
        sa.Column("actor_ref", sa.Text(), nullable=True),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("target_type", sa.Text(), nullable=True),
        sa.Column("target_id", sa.Text(), nullable=True),
        sa.Column(
            "details", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        sa.Column("request_id", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "action ~ '^[a-z][a-z0-9_]*(\\.[a-z][a-z0-9_]*)+$'", name=op.f("ck_audit_log_action_format")
        ),
        sa.CheckConstraint(
            "actor_kind IN ('user', 'api_token', 'agent', 'system')", name=op.f("ck_audit_log_actor_kind")
        ),
        sa.CheckConstraint("jsonb_typeof(details) = 'object'", name=op.f("ck_audit_log_details_object")),
        sa.ForeignKeyConstraint(
            ["actor_user_id"], ["users.id"], name=op.f("fk_audit_log_actor_user_id_users"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["org_id"], ["organizations.id"], name=op.f("fk_audit_log_org_id_organizations"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    op.create_index(op.f("ix_audit_log_actor_user_id"), "audit_log", ["actor_user_id"], unique=False)
    op.create_index(op.f("ix_audit_log_org_id_created_at"), "audit_log", ["org_id", "created_at"], unique=False)
    op.create_index(
        op.f("ix_audit_log_org_id_target_type_target_id"),
        "audit_log",
        ["org_id", "target_type", "target_id"],
        unique=False,
    )
    op.create_table(
        "channel_sessions",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("provider", sa.Text(), server_default=sa.text("'waha'"), nullable=False),
        sa.Column("external_session", sa.Text(), nullable=False),
        sa.Column("label", sa.Text(), nullable=False),
        sa.Column("phone_number", sa.Text(), nullable=True),
        sa.Column("status", sa.Text(), server_default=sa.text("'starting'"), nullable=False),
        sa.Column("base_url", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "phone_number IS NULL OR phone_number ~ '^\\+[1-9][0-9]{6,14}$'",
            name=op.f("ck_channel_sessions_phone_e164"),
        ),
        sa.CheckConstraint("provider IN ('waha')", name=op.f("ck_channel_sessions_provider")),
        sa.CheckConstraint(
            "status IN ('starting', 'scan_qr', 'working', 'stopped', 'failed')", name=op.f("ck_channel_sessions_status")
        ),
        sa.ForeignKeyConstraint(
            ["org_id"], ["organizations.id"], name=op.f("fk_channel_sessions_org_id_organizations"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_channel_sessions")),
        sa.UniqueConstraint("provider", "external_session", name=op.f("uq_channel_sessions_provider_external_session")),
    )
    op.create_index(
        op.f("ix_channel_sessions_org_id_created_at"), "channel_sessions", ["org_id", "created_at"], unique=False
    )
    op.create_table(
        "contacts",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("external_id", sa.Text(), nullable=False),
        sa.Column("display_name", sa.Text(), nullable=True),
        sa.Column("phone_number", sa.Text(), nullable=True),
        sa.Column("email", sa.Text(), nullable=True),
        sa.Column(
            "attributes", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "phone_number IS NULL OR phone_number ~ '^\\+[1-9][0-9]{6,14}$'", name=op.f("ck_contacts_phone_e164")
        ),
        sa.ForeignKeyConstraint(
            ["org_id"], ["organizations.id"], name=op.f("fk_contacts_org_id_organizations"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_contacts")),
        sa.UniqueConstraint("org_id", "external_id", name=op.f("uq_contacts_org_id_external_id")),
    )
    op.create_table(
        "memberships",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("user_id", sa.UUID(), nullable=False),
        sa.Column("role", sa.Text(), server_default=sa.text("'viewer'"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("role IN ('viewer', 'manager', 'admin')", name=op.f("ck_memberships_role")),
        sa.ForeignKeyConstraint(
            ["org_id"], ["organizations.id"], name=op.f("fk_memberships_org_id_organizations"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_memberships_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memberships")),
        sa.UniqueConstraint("org_id", "user_id", name=op.f("uq_memberships_org_id_user_id")),
    )
    op.create_index(op.f("ix_memberships_user_id"), "memberships", ["user_id"], unique=False)
    op.create_table(
        "workspace_autonomy",
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("area", sa.Text(), nullable=False),
        sa.Column("mode", sa.Text(), server_default=sa.text("'propose'"), nullable=False),
        sa.Column("updated_by", sa.UUID(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("area ~ '^[a-z][a-z0-9_]{0,63}$'", name=op.f("ck_workspace_autonomy_area_format")),
        sa.CheckConstraint("mode IN ('off', 'propose', 'auto')", name=op.f("ck_workspace_autonomy_mode")),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_workspace_autonomy_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["updated_by"], ["users.id"], name=op.f("fk_workspace_autonomy_updated_by_users"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("org_id", "area", name=op.f("pk_workspace_autonomy")),
    )
    op.create_table(
        "workspace_daily_briefs",
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("digest", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("jsonb_typeof(digest) = 'object'", name=op.f("ck_workspace_daily_briefs_digest_object")),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_workspace_daily_briefs_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("org_id", "day", name=op.f("pk_workspace_daily_briefs")),
    )
    op.create_table(
        "workspace_home_prefs",
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column(
            "pinned_sections", postgresql.ARRAY(sa.Text()), server_default=sa.text("'{}'::text[]"), nullable=False
        ),
        sa.Column("pinned_areas", postgresql.ARRAY(sa.Text()), server_default=sa.text("'{}'::text[]"), nullable=False),
        sa.Column(
            "prefs", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_workspace_home_prefs_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("org_id", name=op.f("pk_workspace_home_prefs")),
    )
    op.create_table(
        "workspace_token_usage",
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("month", sa.Date(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("cost_micros", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("run_count", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "month = date_trunc('month', month)::date", name=op.f("ck_workspace_token_usage_month_first_day")
        ),
        sa.CheckConstraint("cost_micros >= 0", name=op.f("ck_workspace_token_usage_cost_micros_non_negative")),
        sa.CheckConstraint("input_tokens >= 0", name=op.f("ck_workspace_token_usage_input_tokens_non_negative")),
        sa.CheckConstraint("output_tokens >= 0", name=op.f("ck_workspace_token_usage_output_tokens_non_negative")),
        sa.CheckConstraint("run_count >= 0", name=op.f("ck_workspace_token_usage_run_count_non_negative")),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_workspace_token_usage_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("org_id", "month", name=op.f("pk_workspace_token_usage")),
    )
    op.create_table(
        "agent_usage_monthly",
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("agent_id", sa.UUID(), nullable=False),
        sa.Column("month", sa.Date(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("cost_micros", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("run_count", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "month = date_trunc('month', month)::date", name=op.f("ck_agent_usage_monthly_month_first_day")
        ),
        sa.CheckConstraint("cost_micros >= 0", name=op.f("ck_agent_usage_monthly_cost_micros_non_negative")),
        sa.CheckConstraint("input_tokens >= 0", name=op.f("ck_agent_usage_monthly_input_tokens_non_negative")),
        sa.CheckConstraint("output_tokens >= 0", name=op.f("ck_agent_usage_monthly_output_tokens_non_negative")),
        sa.CheckConstraint("run_count >= 0", name=op.f("ck_agent_usage_monthly_run_count_non_negative")),
        sa.ForeignKeyConstraint(
            ["agent_id"], ["ai_agents.id"], name=op.f("fk_agent_usage_monthly_agent_id_ai_agents"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_agent_usage_monthly_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("agent_id", "month", name=op.f("pk_agent_usage_monthly")),
    )
    op.create_index(
        op.f("ix_agent_usage_monthly_org_id_month"), "agent_usage_monthly", ["org_id", "month"], unique=False
    )
    op.create_table(
        "ai_agent_versions",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("agent_id", sa.UUID(), nullable=False),
        sa.Column("version_number", sa.Integer(), nullable=False),
        sa.Column("system_prompt", sa.Text(), nullable=False),
        sa.Column("persona", sa.Text(), nullable=True),
        sa.Column("skills", postgresql.ARRAY(sa.Text()), server_default=sa.text("'{}'::text[]"), nullable=False),
        sa.Column("provider", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("credential_id", sa.UUID(), nullable=True),
        sa.Column("tool_ids", postgresql.ARRAY(sa.Text()), server_default=sa.text("'{}'::text[]"), nullable=False),
        sa.Column(
            "trigger_config",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text(
                '\'{"events": ["message"], "filters": {"ignore_groups": true, "ignore_self": true, "keyword_regex": null, "business_hours": null}}\'::jsonb'
            ),
            nullable=False,
        ),
        sa.Column("channel_session_id", sa.UUID(), nullable=True),
        sa.Column("max_steps", sa.Integer(), server_default=sa.text("10"), nullable=False),
        sa.Column("token_budget", sa.Integer(), server_default=sa.text("50000"), nullable=False),
        sa.Column("cost_budget_micros", sa.BigInteger(), server_default=sa.text("500000"), nullable=False),
        sa.Column("history_message_window", sa.Integer(), server_default=sa.text("20"), nullable=False),
        sa.Column("history_token_window", sa.Integer(), server_default=sa.text("8000"), nullable=False),
        sa.Column(
            "handoff_keywords",
            postgresql.ARRAY(sa.Text()),
            server_default=sa.text("ARRAY['falar com humano', 'atendente', 'pessoa real']::text[]"),
            nullable=False,
        ),
        sa.Column("handoff_tool_enabled", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column(
            "followup", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        sa.Column("concurrency_policy", sa.Text(), server_default=sa.text("'enqueue'"), nullable=False),
        sa.Column("status", sa.Text(), server_default=sa.text("'draft'"), nullable=False),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("superseded_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_by", sa.UUID(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "concurrency_policy IN ('enqueue', 'steer', 'interrupt', 'reject')",
            name=op.f("ck_ai_agent_versions_concurrency_policy"),
        ),
        sa.CheckConstraint("jsonb_typeof(followup) = 'object'", name=op.f("ck_ai_agent_versions_followup_object")),
        sa.CheckConstraint(
            "jsonb_typeof(trigger_config) = 'object'", name=op.f("ck_ai_agent_versions_trigger_config_object")
        ),
        sa.CheckConstraint(
            "provider IN ('anthropic', 'openai', 'google', 'demo')", name=op.f("ck_ai_agent_versions_provider")
        ),
        sa.CheckConstraint(
            "status <> 'published' OR published_at IS NOT NULL",
            name=op.f("ck_ai_agent_versions_published_has_timestamp"),
        ),
        sa.CheckConstraint(
            "status IN ('draft', 'published', 'superseded', 'archived')", name=op.f("ck_ai_agent_versions_status")
        ),
        sa.CheckConstraint(
            "cost_budget_micros BETWEEN 10000 AND 100000000", name=op.f("ck_ai_agent_versions_cost_budget_range")
        ),
        sa.CheckConstraint(
            "history_message_window BETWEEN 0 AND 500", name=op.f("ck_ai_agent_versions_history_message_window_range")
        ),
        sa.CheckConstraint(
            "history_token_window BETWEEN 0 AND 1000000", name=op.f("ck_ai_agent_versions_history_token_window_range")
        ),
        sa.CheckConstraint("max_steps BETWEEN 1 AND 25", name=op.f("ck_ai_agent_versions_max_steps_range")),
        sa.CheckConstraint(
            "token_budget BETWEEN 1000 AND 500000", name=op.f("ck_ai_agent_versions_token_budget_range")
        ),
        sa.CheckConstraint("version_number >= 1", name=op.f("ck_ai_agent_versions_version_number_positive")),
        sa.ForeignKeyConstraint(
            ["agent_id"], ["ai_agents.id"], name=op.f("fk_ai_agent_versions_agent_id_ai_agents"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["channel_session_id"],
            ["channel_sessions.id"],
            name=op.f("fk_ai_agent_versions_channel_session_id_channel_sessions"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["created_by"], ["users.id"], name=op.f("fk_ai_agent_versions_created_by_users"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["credential_id"],
            ["ai_provider_credentials.id"],
            name=op.f("fk_ai_agent_versions_credential_id_ai_provider_credentials"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["org_id"], ["organizations.id"], name=op.f("fk_ai_agent_versions_org_id_organizations"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ai_agent_versions")),
        sa.UniqueConstraint("agent_id", "version_number", name=op.f("uq_ai_agent_versions_agent_id_version_number")),
    )
    op.create_index(
        op.f("ix_ai_agent_versions_channel_session_id"), "ai_agent_versions", ["channel_session_id"], unique=False
    )
    op.create_index(op.f("ix_ai_agent_versions_credential_id"), "ai_agent_versions", ["credential_id"], unique=False)
    op.create_index(
        op.f("ix_ai_agent_versions_org_id_created_at"), "ai_agent_versions", ["org_id", "created_at"], unique=False
    )
    op.create_index(
        "uq_ai_agent_versions_one_published_per_agent",
        "ai_agent_versions",
        ["agent_id"],
        unique=True,
        postgresql_where=sa.text("status = 'published'"),
    )
    op.create_table(
        "budget_policies",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("agent_id", sa.UUID(), nullable=True),
        sa.Column("token_limit", sa.BigInteger(), nullable=True),
        sa.Column("cost_limit_micros", sa.BigInteger(), nullable=True),
        sa.Column("soft_threshold_pct", sa.Integer(), server_default=sa.text("80"), nullable=False),
        sa.Column("hard_action", sa.Text(), server_default=sa.text("'notify'"), nullable=False),
        sa.Column("enabled", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("created_by", sa.UUID(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "(scope = 'agent') = (agent_id IS NOT NULL)", name=op.f("ck_budget_policies_agent_iff_agent_scope")
        ),
        sa.CheckConstraint(
            "hard_action IN ('notify', 'block_dispatch', 'pause_agent')", name=op.f("ck_budget_policies_hard_action")
        ),
        sa.CheckConstraint("scope IN ('organization', 'agent')", name=op.f("ck_budget_policies_scope")),
        sa.CheckConstraint(
            "cost_limit_micros IS NULL OR cost_limit_micros > 0", name=op.f("ck_budget_policies_cost_limit_positive")
        ),
        sa.CheckConstraint(
            "soft_threshold_pct BETWEEN 1 AND 100", name=op.f("ck_budget_policies_soft_threshold_range")
        ),
        sa.CheckConstraint(
            "token_limit IS NULL OR token_limit > 0", name=op.f("ck_budget_policies_token_limit_positive")
        ),
        sa.ForeignKeyConstraint(
            ["agent_id"], ["ai_agents.id"], name=op.f("fk_budget_policies_agent_id_ai_agents"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["created_by"], ["users.id"], name=op.f("fk_budget_policies_created_by_users"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["org_id"], ["organizations.id"], name=op.f("fk_budget_policies_org_id_organizations"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_budget_policies")),
    )
    op.create_index(op.f("ix_budget_policies_agent_id"), "budget_policies", ["agent_id"], unique=False)
    op.create_index(
        "uq_budget_policies_one_per_subject",
        "budget_policies",
        ["org_id", sa.literal_column("coalesce(agent_id, '00000000-0000-0000-0000-000000000000'::uuid)")],
        unique=True,
    )
    op.create_table(
        "conversations",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("channel_session_id", sa.UUID(), nullable=False),
        sa.Column("contact_id", sa.UUID(), nullable=True),
        sa.Column("chat_id", sa.Text(), nullable=False),
        sa.Column("is_group", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("status", sa.Text(), server_default=sa.text("'open'"), nullable=False),
        sa.Column("assigned_user_id", sa.UUID(), nullable=True),
        sa.Column("handoff_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_message_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("status IN ('open', 'handoff', 'closed')", name=op.f("ck_conversations_status")),
        sa.ForeignKeyConstraint(
            ["assigned_user_id"],
            ["users.id"],
            name=op.f("fk_conversations_assigned_user_id_users"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["channel_session_id"],
            ["channel_sessions.id"],
            name=op.f("fk_conversations_channel_session_id_channel_sessions"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["contact_id"], ["contacts.id"], name=op.f("fk_conversations_contact_id_contacts"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["org_id"], ["organizations.id"], name=op.f("fk_conversations_org_id_organizations"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversations")),
        sa.UniqueConstraint("channel_session_id", "chat_id", name=op.f("uq_conversations_channel_session_id_chat_id")),
    )
    op.create_index(op.f("ix_conversations_contact_id"), "conversations", ["contact_id"], unique=False)
    op.create_index(
        op.f("ix_conversations_org_id_last_message_at"), "conversations", ["org_id", "last_message_at"], unique=False
    )
    op.create_table(
        "messages",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("conversation_id", sa.UUID(), nullable=False),
        sa.Column("channel_session_id", sa.UUID(), nullable=False),
        sa.Column("direction", sa.Text(), nullable=False),
        sa.Column("sender", sa.Text(), nullable=False),
        sa.Column("external_id", sa.Text(), nullable=True),
        sa.Column("dedupe_key", sa.Text(), nullable=True),
        sa.Column("body", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("content_type", sa.Text(), server_default=sa.text("'text'"), nullable=False),
        sa.Column("from_me", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("delivery_status", sa.Text(), server_default=sa.text("'received'"), nullable=False),
        sa.Column("delivery_error", sa.Text(), nullable=True),
        sa.Column("run_id", sa.UUID(), nullable=True),
        sa.Column("sent_by_user_id", sa.UUID(), nullable=True),
        sa.Column("occurred_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column(
            "attributes", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "content_type IN ('text', 'image', 'audio', 'video', 'document', 'location', 'other')",
            name=op.f("ck_messages_content_type"),
        ),
        sa.CheckConstraint(
            "delivery_status IN ('received', 'pending', 'sent', 'delivered', 'read', 'failed')",
            name=op.f("ck_messages_delivery_status"),
        ),
        sa.CheckConstraint("direction IN ('inbound', 'outbound')", name=op.f("ck_messages_direction")),
        sa.CheckConstraint("sender IN ('contact', 'agent', 'human', 'system')", name=op.f("ck_messages_sender")),
        sa.ForeignKeyConstraint(
            ["channel_session_id"],
            ["channel_sessions.id"],
            name=op.f("fk_messages_channel_session_id_channel_sessions"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_messages_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["org_id"], ["organizations.id"], name=op.f("fk_messages_org_id_organizations"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["sent_by_user_id"], ["users.id"], name=op.f("fk_messages_sent_by_user_id_users"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_messages")),
        sa.UniqueConstraint("channel_session_id", "dedupe_key", name=op.f("uq_messages_channel_session_id_dedupe_key")),
        sa.UniqueConstraint(
            "channel_session_id", "external_id", name=op.f("uq_messages_channel_session_id_external_id")
        ),
    )
    op.create_index(
        op.f("ix_messages_conversation_id_occurred_at"), "messages", ["conversation_id", "occurred_at"], unique=False
    )
    op.create_index(op.f("ix_messages_org_id_created_at"), "messages", ["org_id", "created_at"], unique=False)
    op.create_index(op.f("ix_messages_run_id"), "messages", ["run_id"], unique=False)
    op.create_table(
        "ai_agent_runs",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("agent_id", sa.UUID(), nullable=False),
        sa.Column("agent_version_id", sa.UUID(), nullable=False),
        sa.Column("conversation_id", sa.UUID(), nullable=True),
        sa.Column("contact_id", sa.UUID(), nullable=True),
        sa.Column("channel_session_id", sa.UUID(), nullable=True),
        sa.Column("inbound_message_id", sa.UUID(), nullable=True),
        sa.Column(
            "inbound_message_ids", postgresql.ARRAY(sa.UUID()), server_default=sa.text("'{}'::uuid[]"), nullable=False
        ),
        sa.Column("outbound_message_id", sa.UUID(), nullable=True),
        sa.Column("status", sa.Text(), server_default=sa.text("'pending'"), nullable=False),
        sa.Column("vitality", sa.Text(), nullable=True),
        sa.Column("error_family", sa.Text(), nullable=True),
        sa.Column("abort_reason", sa.Text(), nullable=True),
        sa.Column("error_code", sa.Text(), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("wake_reason", sa.Text(), server_default=sa.text("'userMessage'"), nullable=False),
        sa.Column(
            "wake_context",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("attempt", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("parent_run_id", sa.UUID(), nullable=True),
        sa.Column("is_dry_run", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("provider", sa.Text(), nullable=True),
        sa.Column("model", sa.Text(), nullable=True),
        sa.Column("tokens_in", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("tokens_out", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("cost_micros", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("latency_ms", sa.Integer(), nullable=True),
        sa.Column("steps_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "tool_calls", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'[]'::jsonb"), nullable=False
        ),
        sa.Column("final_text", sa.Text(), nullable=True),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.Column("would_send_to", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column(
            "actions_executed",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "actions_proposed",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "error_family IN ('transientUpstream', 'budgetExceeded', 'processLost', 'silentRun', 'toolFailure', 'unknown')",
            name=op.f("ck_ai_agent_runs_error_family"),
        ),
        sa.CheckConstraint("jsonb_typeof(tool_calls) = 'array'", name=op.f("ck_ai_agent_runs_tool_calls_array")),
        sa.CheckConstraint(
            "provider IN ('anthropic', 'openai', 'google', 'demo')", name=op.f("ck_ai_agent_runs_provider")
        ),
        sa.CheckConstraint(
            "status IN ('pending', 'running', 'completed', 'failed', 'aborted', 'handoff')",
            name=op.f("ck_ai_agent_runs_status"),
        ),
        sa.CheckConstraint(
            "vitality IN ('alive', 'productive', 'completed', 'blocked', 'empty', 'looping', 'failed', 'stalled', 'dead')",
            name=op.f("ck_ai_agent_runs_vitality"),
        ),
        sa.CheckConstraint(
            "wake_reason IN ('userMessage', 'assignment', 'pipelineStep', 'childCompleted', 'followUp', 'recovery')",
            name=op.f("ck_ai_agent_runs_wake_reason"),
        ),
        sa.CheckConstraint("attempt >= 0", name=op.f("ck_ai_agent_runs_attempt_non_negative")),
        sa.CheckConstraint("cost_micros >= 0", name=op.f("ck_ai_agent_runs_cost_micros_non_negative")),
        sa.CheckConstraint("latency_ms >= 0", name=op.f("ck_ai_agent_runs_latency_ms_non_negative")),
        sa.CheckConstraint(
            "parent_run_id IS NULL OR parent_run_id <> id", name=op.f("ck_ai_agent_runs_parent_not_self")
        ),
        sa.CheckConstraint("steps_count >= 0", name=op.f("ck_ai_agent_runs_steps_count_non_negative")),
        sa.CheckConstraint("tokens_in >= 0", name=op.f("ck_ai_agent_runs_tokens_in_non_negative")),
        sa.CheckConstraint("tokens_out >= 0", name=op.f("ck_ai_agent_runs_tokens_out_non_negative")),
        sa.ForeignKeyConstraint(
            ["agent_id"], ["ai_agents.id"], name=op.f("fk_ai_agent_runs_agent_id_ai_agents"), ondelete="RESTRICT"
        ),
        sa.ForeignKeyConstraint(
            ["agent_version_id"],
            ["ai_agent_versions.id"],
            name=op.f("fk_ai_agent_runs_agent_version_id_ai_agent_versions"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["channel_session_id"],
            ["channel_sessions.id"],
            name=op.f("fk_ai_agent_runs_channel_session_id_channel_sessions"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["contact_id"], ["contacts.id"], name=op.f("fk_ai_agent_runs_contact_id_contacts"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_ai_agent_runs_conversation_id_conversations"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["inbound_message_id"],
            ["messages.id"],
            name=op.f("fk_ai_agent_runs_inbound_message_id_messages"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["org_id"], ["organizations.id"], name=op.f("fk_ai_agent_runs_org_id_organizations"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["outbound_message_id"],
            ["messages.id"],
            name=op.f("fk_ai_agent_runs_outbound_message_id_messages"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["parent_run_id"],
            ["ai_agent_runs.id"],
            name=op.f("fk_ai_agent_runs_parent_run_id_ai_agent_runs"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ai_agent_runs")),
    )
    op.create_index(
        "ix_ai_agent_runs_active_heartbeat",
        "ai_agent_runs",
        ["heartbeat_at"],
        unique=False,
        postgresql_where=sa.text("status IN ('pending', 'running')"),
    )
    op.create_index(
        op.f("ix_ai_agent_runs_agent_id_created_at"), "ai_agent_runs", ["agent_id", "created_at"], unique=False
    )
    op.create_index(op.f("ix_ai_agent_runs_agent_version_id"), "ai_agent_runs", ["agent_version_id"], unique=False)
    op.create_index(op.f("ix_ai_agent_runs_channel_session_id"), "ai_agent_runs", ["channel_session_id"], unique=False)
    op.create_index(op.f("ix_ai_agent_runs_contact_id"), "ai_agent_runs", ["contact_id"], unique=False)
    op.create_index(
        op.f("ix_ai_agent_runs_conversation_id_created_at"),
        "ai_agent_runs",
        ["conversation_id", "created_at"],
        unique=False,
    )
    op.create_index(op.f("ix_ai_agent_runs_inbound_message_id"), "ai_agent_runs", ["inbound_message_id"], unique=False)
    op.create_index(op.f("ix_ai_agent_runs_org_id_created_at"), "ai_agent_runs", ["org_id", "created_at"], unique=False)
    op.create_index(
        op.f("ix_ai_agent_runs_outbound_message_id"), "ai_agent_runs", ["outbound_message_id"], unique=False
    )
    op.create_index(op.f("ix_ai_agent_runs_parent_run_id"), "ai_agent_runs", ["parent_run_id"], unique=False)
    op.create_index(
        "uq_ai_agent_runs_one_active_per_conversation",
        "ai_agent_runs",
        ["conversation_id"],
        unique=True,
        postgresql_where=sa.text("status IN ('pending', 'running') AND NOT is_dry_run"),
    )
    op.create_table(
        "dispatch_decisions",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("dispatch_event_id", sa.UUID(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("conversation_id", sa.UUID(), nullable=True),
        sa.Column("inbound_message_id", sa.UUID(), nullable=True),
        sa.Column("agent_id", sa.UUID(), nullable=True),
        sa.Column("agent_version_id", sa.UUID(), nullable=True),
        sa.Column("run_id", sa.UUID(), nullable=True),
        sa.Column("wake_reason", sa.Text(), server_default=sa.text("'userMessage'"), nullable=False),
        sa.Column("is_dry_run", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column(
            "details", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "outcome <> 'dispatched' OR run_id IS NOT NULL", name=op.f("ck_dispatch_decisions_dispatched_has_run")
        ),
        sa.CheckConstraint(
            "outcome IN ('dispatched', 'no_match', 'conv_busy', 'budget_exceeded', 'rate_limited', 'queued', 'steered')",
            name=op.f("ck_dispatch_decisions_outcome"),
        ),
        sa.CheckConstraint(
            "wake_reason IN ('userMessage', 'assignment', 'pipelineStep', 'childCompleted', 'followUp', 'recovery')",
            name=op.f("ck_dispatch_decisions_wake_reason"),
        ),
        sa.ForeignKeyConstraint(
            ["agent_id"], ["ai_agents.id"], name=op.f("fk_dispatch_decisions_agent_id_ai_agents"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["agent_version_id"],
            ["ai_agent_versions.id"],
            name=op.f("fk_dispatch_decisions_agent_version_id_ai_agent_versions"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_dispatch_decisions_conversation_id_conversations"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["inbound_message_id"],
            ["messages.id"],
            name=op.f("fk_dispatch_decisions_inbound_message_id_messages"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_dispatch_decisions_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dispatch_decisions")),
        sa.UniqueConstraint(
            "dispatch_event_id", "outcome", name=op.f("uq_dispatch_decisions_dispatch_event_id_outcome")
        ),
    )
    op.create_index(op.f("ix_dispatch_decisions_agent_id"), "dispatch_decisions", ["agent_id"], unique=False)
    op.create_index(
        op.f("ix_dispatch_decisions_agent_version_id"), "dispatch_decisions", ["agent_version_id"], unique=False
    )
    op.create_index(
        op.f("ix_dispatch_decisions_conversation_id_created_at"),
        "dispatch_decisions",
        ["conversation_id", "created_at"],
        unique=False,
    )
    op.create_index(
        op.f("ix_dispatch_decisions_inbound_message_id"), "dispatch_decisions", ["inbound_message_id"], unique=False
    )
    op.create_index(
        op.f("ix_dispatch_decisions_org_id_created_at"), "dispatch_decisions", ["org_id", "created_at"], unique=False
    )
    op.create_index(
        op.f("ix_dispatch_decisions_org_id_outcome_created_at"),
        "dispatch_decisions",
        ["org_id", "outcome", "created_at"],
        unique=False,
    )
    op.create_index(op.f("ix_dispatch_decisions_run_id"), "dispatch_decisions", ["run_id"], unique=False)
    op.create_table(
        "agent_decisions",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("run_id", sa.UUID(), nullable=True),
        sa.Column("agent_id", sa.UUID(), nullable=True),
        sa.Column("area", sa.Text(), nullable=False),
        sa.Column("action_type", sa.Text(), nullable=False),
        sa.Column("proposed_action", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("autonomy_tier", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), server_default=sa.text("'proposed'"), nullable=False),
        sa.Column("rationale", sa.Text(), nullable=True),
        sa.Column("decided_by", sa.UUID(), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("executed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("execution_result", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("area ~ '^[a-z][a-z0-9_]{0,63}$'", name=op.f("ck_agent_decisions_area_format")),
        sa.CheckConstraint(
            "autonomy_tier IN ('off', 'propose', 'auto')", name=op.f("ck_agent_decisions_autonomy_tier")
        ),
        sa.CheckConstraint(
            "status <> 'executed' OR executed_at IS NOT NULL", name=op.f("ck_agent_decisions_executed_has_timestamp")
        ),
        sa.CheckConstraint(
            "status IN ('proposed', 'approved', 'rejected', 'executed')", name=op.f("ck_agent_decisions_status")
        ),
        sa.CheckConstraint(
            "status NOT IN ('approved', 'rejected') OR decided_at IS NOT NULL",
            name=op.f("ck_agent_decisions_decided_has_timestamp"),
        ),
        sa.ForeignKeyConstraint(
            ["agent_id"], ["ai_agents.id"], name=op.f("fk_agent_decisions_agent_id_ai_agents"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["decided_by"], ["users.id"], name=op.f("fk_agent_decisions_decided_by_users"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["org_id"], ["organizations.id"], name=op.f("fk_agent_decisions_org_id_organizations"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["ai_agent_runs.id"], name=op.f("fk_agent_decisions_run_id_ai_agent_runs"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agent_decisions")),
    )
    op.create_index(op.f("ix_agent_decisions_agent_id"), "agent_decisions", ["agent_id"], unique=False)
    op.create_index(
        op.f("ix_agent_decisions_org_id_action_type_status"),
        "agent_decisions",
        ["org_id", "action_type", "status"],
        unique=False,
    )
    op.create_index(
        op.f("ix_agent_decisions_org_id_status_created_at"),
        "agent_decisions",
        ["org_id", "status", "created_at"],
        unique=False,
    )
    op.create_index(op.f("ix_agent_decisions_run_id"), "agent_decisions", ["run_id"], unique=False)
    op.create_table(
        "budget_incidents",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("policy_id", sa.UUID(), nullable=True),
        sa.Column("agent_id", sa.UUID(), nullable=True),
        sa.Column("run_id", sa.UUID(), nullable=True),
        sa.Column("severity", sa.Text(), nullable=False),
        sa.Column("period_month", sa.Date(), nullable=False),
        sa.Column("spent_micros", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("limit_micros", sa.BigInteger(), nullable=True),
        sa.Column("spent_tokens", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("limit_tokens", sa.BigInteger(), nullable=True),
        sa.Column("action_taken", sa.Text(), server_default=sa.text("'notify'"), nullable=False),
        sa.Column(
            "details", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        sa.Column("notified_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("resolved_by", sa.UUID(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "(scope = 'agent') = (agent_id IS NOT NULL)", name=op.f("ck_budget_incidents_agent_iff_agent_scope")
        ),
        sa.CheckConstraint(
            "action_taken IN ('notify', 'block_dispatch', 'pause_agent')", name=op.f("ck_budget_incidents_action_taken")
        ),
        sa.CheckConstraint(
            "period_month = date_trunc('month', period_month)::date", name=op.f("ck_budget_incidents_month_first_day")
        ),
        sa.CheckConstraint("scope IN ('organization', 'agent')", name=op.f("ck_budget_incidents_scope")),
        sa.CheckConstraint("severity IN ('warning', 'hard')", name=op.f("ck_budget_incidents_severity")),
        sa.CheckConstraint("spent_micros >= 0", name=op.f("ck_budget_incidents_spent_micros_non_negative")),
        sa.CheckConstraint("spent_tokens >= 0", name=op.f("ck_budget_incidents_spent_tokens_non_negative")),
        sa.ForeignKeyConstraint(
            ["agent_id"], ["ai_agents.id"], name=op.f("fk_budget_incidents_agent_id_ai_agents"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["org_id"], ["organizations.id"], name=op.f("fk_budget_incidents_org_id_organizations"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["policy_id"],
            ["budget_policies.id"],
            name=op.f("fk_budget_incidents_policy_id_budget_policies"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["resolved_by"], ["users.id"], name=op.f("fk_budget_incidents_resolved_by_users"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["ai_agent_runs.id"], name=op.f("fk_budget_incidents_run_id_ai_agent_runs"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_budget_incidents")),
    )
    op.create_index(op.f("ix_budget_incidents_agent_id"), "budget_incidents", ["agent_id"], unique=False)
    op.create_index(
        op.f("ix_budget_incidents_org_id_created_at"), "budget_incidents", ["org_id", "created_at"], unique=False
    )
    op.create_index(op.f("ix_budget_incidents_policy_id"), "budget_incidents", ["policy_id"], unique=False)
    op.create_index(op.f("ix_budget_incidents_run_id"), "budget_incidents", ["run_id"], unique=False)
    op.create_index(
        "uq_budget_incidents_once_per_subject_month_severity",
        "budget_incidents",
        [
            "org_id",
            sa.literal_column("coalesce(agent_id, '00000000-0000-0000-0000-000000000000'::uuid)"),
            "period_month",
            "severity",
        ],
        unique=True,
    )
    op.create_table(
        "scheduled_followups",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("conversation_id", sa.UUID(), nullable=False),
        sa.Column("contact_id", sa.UUID(), nullable=True),
        sa.Column("agent_id", sa.UUID(), nullable=True),
        sa.Column("created_by_run_id", sa.UUID(), nullable=True),
        sa.Column("created_by_user_id", sa.UUID(), nullable=True),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column(
            "context", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        sa.Column("idempotency_key", sa.Text(), nullable=True),
        sa.Column("status", sa.Text(), server_default=sa.text("'scheduled'"), nullable=False),
        sa.Column("fired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("fired_run_id", sa.UUID(), nullable=True),
        sa.Column("cancelled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "status <> 'cancelled' OR cancelled_at IS NOT NULL",
            name=op.f("ck_scheduled_followups_cancelled_has_timestamp"),
        ),
        sa.CheckConstraint(
            "status <> 'fired' OR fired_at IS NOT NULL", name=op.f("ck_scheduled_followups_fired_has_timestamp")
        ),
        sa.CheckConstraint(
            "status IN ('scheduled', 'fired', 'cancelled', 'failed')", name=op.f("ck_scheduled_followups_status")
        ),
        sa.ForeignKeyConstraint(
            ["agent_id"], ["ai_agents.id"], name=op.f("fk_scheduled_followups_agent_id_ai_agents"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["contact_id"],
            ["contacts.id"],
            name=op.f("fk_scheduled_followups_contact_id_contacts"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_scheduled_followups_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["created_by_run_id"],
            ["ai_agent_runs.id"],
            name=op.f("fk_scheduled_followups_created_by_run_id_ai_agent_runs"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["created_by_user_id"],
            ["users.id"],
            name=op.f("fk_scheduled_followups_created_by_user_id_users"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["fired_run_id"],
            ["ai_agent_runs.id"],
            name=op.f("fk_scheduled_followups_fired_run_id_ai_agent_runs"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_scheduled_followups_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_scheduled_followups")),
        sa.UniqueConstraint("org_id", "idempotency_key", name=op.f("uq_scheduled_followups_org_id_idempotency_key")),
    )
    op.create_index(op.f("ix_scheduled_followups_agent_id"), "scheduled_followups", ["agent_id"], unique=False)
    op.create_index(op.f("ix_scheduled_followups_contact_id"), "scheduled_followups", ["contact_id"], unique=False)
    op.create_index(
        op.f("ix_scheduled_followups_conversation_id_status"),
        "scheduled_followups",
        ["conversation_id", "status"],
        unique=False,
    )
    op.create_index(
        op.f("ix_scheduled_followups_created_by_run_id"), "scheduled_followups", ["created_by_run_id"], unique=False
    )
    op.create_index(
        "ix_scheduled_followups_due",
        "scheduled_followups",
        ["due_at"],
        unique=False,
        postgresql_where=sa.text("status = 'scheduled'"),
    )
    op.create_index(
        op.f("ix_scheduled_followups_org_id_status_due_at"),
        "scheduled_followups",
        ["org_id", "status", "due_at"],
        unique=False,
    )
    op.create_table(
        "workspace_insights",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("dedupe_key", sa.Text(), nullable=False),
        sa.Column("area", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), server_default=sa.text("'insight'"), nullable=False),
        sa.Column("severity", sa.Text(), server_default=sa.text("'info'"), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=True),
        sa.Column(
            "suggested_actions",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column("insight_date", sa.Date(), server_default=sa.text("CURRENT_DATE"), nullable=False),
        sa.Column("agent_decision_id", sa.UUID(), nullable=True),
        sa.Column("run_id", sa.UUID(), nullable=True),
        sa.Column("status", sa.Text(), server_default=sa.text("'new'"), nullable=False),
        sa.Column("status_changed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("status_changed_by", sa.UUID(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("area ~ '^[a-z][a-z0-9_]{0,63}$'", name=op.f("ck_workspace_insights_area_format")),
        sa.CheckConstraint(
            "jsonb_typeof(suggested_actions) = 'array'", name=op.f("ck_workspace_insights_suggested_actions_array")
        ),
        sa.CheckConstraint("kind IN ('insight', 'proposed_action')", name=op.f("ck_workspace_insights_kind")),
        sa.CheckConstraint("severity IN ('info', 'warning', 'critical')", name=op.f("ck_workspace_insights_severity")),
        sa.CheckConstraint(
            "status IN ('new', 'seen', 'dismissed', 'actioned')", name=op.f("ck_workspace_insights_status")
        ),
        sa.ForeignKeyConstraint(
            ["agent_decision_id"],
            ["agent_decisions.id"],
            name=op.f("fk_workspace_insights_agent_decision_id_agent_decisions"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_workspace_insights_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["ai_agent_runs.id"],
            name=op.f("fk_workspace_insights_run_id_ai_agent_runs"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["status_changed_by"],
            ["users.id"],
            name=op.f("fk_workspace_insights_status_changed_by_users"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workspace_insights")),
        sa.UniqueConstraint("org_id", "dedupe_key", name=op.f("uq_workspace_insights_org_id_dedupe_key")),
    )
    op.create_index(
        op.f("ix_workspace_insights_agent_decision_id"), "workspace_insights", ["agent_decision_id"], unique=False
    )
    op.create_index(
        op.f("ix_workspace_insights_org_id_status_insight_date"),
        "workspace_insights",
        ["org_id", "status", "insight_date"],
        unique=False,
    )
    op.create_index(op.f("ix_workspace_insights_run_id"), "workspace_insights", ["run_id"], unique=False)

    # Foreign keys that close a cycle (agent <-> published version, message <-> run).
    op.create_foreign_key(
        op.f("fk_ai_agents_published_version_id_ai_agent_versions"),
        "ai_agents",
        "ai_agent_versions",
        ["published_version_id"],
        ["id"],
        ondelete="SET NULL",
    )
    op.create_foreign_key(
        op.f("fk_messages_run_id_ai_agent_runs"), "messages", "ai_agent_runs", ["run_id"], ["id"], ondelete="SET NULL"
    )

    for table in TENANT_TABLES:
        for statement in tenancy.enable_rls_statements(table):
            op.execute(statement)
    for table in LOOKUP_TABLES:
        for statement in tenancy.owner_lookup_statements(table):
            op.execute(statement)
    for statement in LOOKUP_FUNCTIONS_SQL:
        op.execute(statement)


def downgrade() -> None:
    for name in LOOKUP_FUNCTION_SIGNATURES:
        op.execute(f"DROP FUNCTION IF EXISTS {name}")
    op.drop_constraint(op.f("fk_ai_agents_published_version_id_ai_agent_versions"), "ai_agents", type_="foreignkey")
    op.drop_constraint(op.f("fk_messages_run_id_ai_agent_runs"), "messages", type_="foreignkey")
    # Dropping a table drops its indexes, constraints and policies too.
    for table in reversed(CREATION_ORDER):
        op.drop_table(table)
