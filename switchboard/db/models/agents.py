"""Agents as data [004 §3]: agents, their immutable-once-published versions,
bring-your-own provider credentials, and the global model catalog."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from switchboard.db.base import (
    Base,
    OrgScoped,
    Timestamps,
    UUIDPrimaryKey,
    check_in,
    check_non_negative,
)
from switchboard.db.enums import (
    CREDENTIAL_PROVIDERS,
    AgentKind,
    AgentPauseReason,
    AgentVersionStatus,
    ConcurrencyPolicy,
    CredentialValidation,
    LlmProvider,
)

# The seed's default trigger [004 §3.2] (inbound messages, no groups, not our own messages),
# stored in the flat shape of the ``published`` contract's TriggerConfig (revision 0006).
DEFAULT_TRIGGER_CONFIG_SQL = (
    '\'{"event_types": ["message"], "ignore_groups": true, "ignore_own": true,'
    ' "keyword_regex": null, "business_hours": null}\'::jsonb'
)
DEFAULT_HANDOFF_KEYWORDS_SQL = "ARRAY['falar com humano', 'atendente', 'pessoa real']::text[]"


class AiAgent(UUIDPrimaryKey, OrgScoped, Timestamps, Base):
    """An agent of an organization. It answers only through its published version."""

    __tablename__ = "ai_agents"
    __table_args__ = (
        check_in("kind", AgentKind),
        check_in("pause_reason", AgentPauseReason),
        CheckConstraint("char_length(name) BETWEEN 1 AND 200", name="name_length"),
        CheckConstraint(
            "monthly_budget_micros IS NULL OR monthly_budget_micros > 0",
            name="monthly_budget_positive",
        ),
        CheckConstraint("(paused_at IS NULL) = (pause_reason IS NULL)", name="pause_consistent"),
        # The dispatcher's candidate order: priority desc, then created_at asc [004 §1.2].
        Index(
            "ix_ai_agents_dispatch_candidates",
            "org_id",
            "priority",
            "created_at",
            postgresql_where=text("published_version_id IS NOT NULL AND archived_at IS NULL"),
        ),
        Index(None, "org_id", "created_at"),
    )

    name: Mapped[str]
    description: Mapped[str | None]
    kind: Mapped[str] = mapped_column(server_default=text("'mcp_agent'"))
    priority: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    # NULL = not answering (draft only, or paused). Set atomically by publish.
    published_version_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey(
            "ai_agent_versions.id",
            ondelete="SET NULL",
            use_alter=True,
        )
    )
    paused_at: Mapped[datetime | None]
    pause_reason: Mapped[str | None]
    # Soft delete: archived agents keep their versions and runs for history.
    archived_at: Mapped[datetime | None]
    # The agent's own monthly spend cap in micro-USD when no budget policy covers it; NULL = none.
    monthly_budget_micros: Mapped[int | None] = mapped_column(BigInteger)
    created_by: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))

    versions: Mapped[list[AiAgentVersion]] = relationship(
        back_populates="agent",
        foreign_keys="AiAgentVersion.agent_id",
        lazy="raise",
        passive_deletes=True,
    )
    published_version: Mapped[AiAgentVersion | None] = relationship(
        foreign_keys=[published_version_id], post_update=True, lazy="raise"
    )


class AiAgentVersion(UUIDPrimaryKey, OrgScoped, Timestamps, Base):
    """A full snapshot of an agent's configuration. Only drafts may change."""

    __tablename__ = "ai_agent_versions"
    __table_args__ = (
        UniqueConstraint("agent_id", "version_number"),
        check_in("provider", LlmProvider),
        check_in("status", AgentVersionStatus),
        check_in("concurrency_policy", ConcurrencyPolicy),
        CheckConstraint("version_number >= 1", name="version_number_positive"),
        CheckConstraint("max_steps BETWEEN 1 AND 25", name="max_steps_range"),
        CheckConstraint("token_budget BETWEEN 1000 AND 500000", name="token_budget_range"),
        # 1 cent .. 100 USD per run, in micro-USD [004 §3.2: 1..10000 cents].
        CheckConstraint("cost_budget_micros BETWEEN 10000 AND 100000000", name="cost_budget_range"),
        CheckConstraint("history_message_window BETWEEN 0 AND 500", name="history_message_window_range"),
        CheckConstraint("history_token_window BETWEEN 0 AND 1000000", name="history_token_window_range"),
        CheckConstraint("silence_timeout_minutes BETWEEN 1 AND 240", name="silence_timeout_minutes_range"),
        CheckConstraint("cardinality(subagent_ids) <= 20", name="subagent_ids_count"),
        CheckConstraint(
            "handoff_message IS NULL OR char_length(handoff_message) BETWEEN 1 AND 1000", name="handoff_message_length"
        ),
        CheckConstraint("jsonb_typeof(trigger_config) = 'object'", name="trigger_config_object"),
        CheckConstraint("jsonb_typeof(followup) = 'object'", name="followup_object"),
        CheckConstraint("status <> 'published' OR published_at IS NOT NULL", name="published_has_timestamp"),
        # At most one published version per agent: publish supersedes the previous one first.
        Index(
            "uq_ai_agent_versions_one_published_per_agent",
            "agent_id",
            unique=True,
            postgresql_where=text("status = 'published'"),
        ),
        Index(None, "org_id", "created_at"),
    )

    agent_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("ai_agents.id", ondelete="CASCADE"))
    version_number: Mapped[int] = mapped_column(Integer)

    system_prompt: Mapped[str]
    # Persona / team brief and skill names: labeled layers of the composed prompt.
    persona: Mapped[str | None]
    skills: Mapped[list[str]] = mapped_column(server_default=text("'{}'::text[]"))
    provider: Mapped[str]
    model: Mapped[str]
    # NULL = resolve at run time: org default credential for the provider, then platform key.
    credential_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("ai_provider_credentials.id", ondelete="RESTRICT"), index=True
    )
    tool_ids: Mapped[list[str]] = mapped_column(server_default=text("'{}'::text[]"))
    # {"event_types", "ignore_groups", "ignore_own", "keyword_regex", "business_hours"} (contracts.TriggerConfig).
    trigger_config: Mapped[dict[str, Any]] = mapped_column(server_default=text(DEFAULT_TRIGGER_CONFIG_SQL))
    # NULL for agents without a channel (scheduled analysis); publish requires one for chat agents.
    channel_session_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("channel_sessions.id", ondelete="RESTRICT"), index=True
    )

    max_steps: Mapped[int] = mapped_column(Integer, server_default=text("10"))
    token_budget: Mapped[int] = mapped_column(Integer, server_default=text("50000"))
    cost_budget_micros: Mapped[int] = mapped_column(BigInteger, server_default=text("500000"))
    history_message_window: Mapped[int] = mapped_column(Integer, server_default=text("20"))
    history_token_window: Mapped[int] = mapped_column(Integer, server_default=text("8000"))
    # Silence watchdog of a run [002]: no model output or tool result for this long aborts it.
    silence_timeout_minutes: Mapped[int] = mapped_column(Integer, server_default=text("15"))
    # A proposed write parks the run until the owner decides (docs/autonomy.md, migration 0013).
    pause_on_proposal: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    # Sent to the customer once when a run of this version hands off (revision 0024); NULL: nothing.
    handoff_message: Mapped[str | None]
    # Sub-agents and classification (migration 0017, docs/agent-context.md): agents of the org this
    # version may delegate to, and whether inbound messages are classified before the loop.
    subagent_ids: Mapped[list[uuid.UUID]] = mapped_column(server_default=text("'{}'::uuid[]"))
    classification_enabled: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))

    handoff_keywords: Mapped[list[str]] = mapped_column(server_default=text(DEFAULT_HANDOFF_KEYWORDS_SQL))
    handoff_tool_enabled: Mapped[bool] = mapped_column(Boolean, server_default=text("true"))
    # {"enabled", "flow_pointer_ids", "callback_enabled"}; PATCH merges only sent keys [004 §4.4].
    followup: Mapped[dict[str, Any]] = mapped_column(server_default=text("'{}'::jsonb"))
    concurrency_policy: Mapped[str] = mapped_column(server_default=text("'enqueue'"))

    status: Mapped[str] = mapped_column(server_default=text("'draft'"))
    published_at: Mapped[datetime | None]
    superseded_at: Mapped[datetime | None]
    created_by: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))

    agent: Mapped[AiAgent] = relationship(back_populates="versions", foreign_keys=[agent_id], lazy="raise")


class AiProviderCredential(UUIDPrimaryKey, OrgScoped, Timestamps, Base):
    """A bring-your-own provider key, AES-GCM encrypted; the plaintext is never stored.

    ``key_id`` names the encryption key used, so keys rotate without downtime:
    new rows use the new key, old rows decrypt with theirs until re-encrypted.
    The associated data binds the ciphertext to this row and org
    (``switchboard.credentials.credential_aad``).

    Deleting is a tombstone: ``deleted_at`` is set and the sealed key is erased
    (all four secret columns NULL), while the row stays for the versions and
    runs that name it. Only live rows hold a secret, and labels are unique
    among live rows only.
    """

    __tablename__ = "ai_provider_credentials"
    __table_args__ = (
        check_in("provider", CREDENTIAL_PROVIDERS),
        check_in("validation_status", CredentialValidation),
        CheckConstraint("octet_length(iv) = 12", name="iv_length"),
        CheckConstraint("octet_length(tag) = 16", name="tag_length"),
        CheckConstraint("octet_length(ciphertext) > 0", name="ciphertext_present"),
        CheckConstraint("char_length(last4) BETWEEN 1 AND 4", name="last4_length"),
        CheckConstraint("char_length(key_id) BETWEEN 1 AND 64", name="key_id_length"),
        CheckConstraint("char_length(label) BETWEEN 1 AND 200", name="label_length"),
        CheckConstraint("base_url IS NULL OR char_length(base_url) BETWEEN 1 AND 2048", name="base_url_length"),
        CheckConstraint(
            "(ciphertext IS NULL) = (iv IS NULL) AND (ciphertext IS NULL) = (tag IS NULL)"
            " AND (ciphertext IS NULL) = (key_id IS NULL)",
            name="secret_complete",
        ),
        # A live credential holds its sealed key; a deleted one holds none and is neither active nor default.
        CheckConstraint("(deleted_at IS NULL) = (ciphertext IS NOT NULL)", name="secret_iff_live"),
        CheckConstraint("deleted_at IS NULL OR NOT (is_active OR is_default)", name="deleted_is_inactive"),
        # The org's default key for a provider (step 2 of credential resolution).
        Index(
            "uq_ai_provider_credentials_one_default_per_provider",
            "org_id",
            "provider",
            unique=True,
            postgresql_where=text("is_default AND is_active"),
        ),
        Index(
            "uq_ai_provider_credentials_live_label",
            "org_id",
            "provider",
            "label",
            unique=True,
            postgresql_where=text("deleted_at IS NULL"),
        ),
    )

    provider: Mapped[str]
    label: Mapped[str]
    # The sealed key: NULL only once the credential is deleted.
    ciphertext: Mapped[bytes | None]
    iv: Mapped[bytes | None]
    tag: Mapped[bytes | None]
    key_id: Mapped[str | None]
    last4: Mapped[str]
    # An OpenAI-compatible (or proxy) endpoint instead of the provider's, in the official SDK's
    # convention (OpenAI: ending in /v1). NULL = the provider's configured default.
    base_url: Mapped[str | None]
    validation_status: Mapped[str] = mapped_column(server_default=text("'pending'"))
    validated_at: Mapped[datetime | None]
    validation_error: Mapped[str | None]
    models_available: Mapped[list[str] | None]
    is_active: Mapped[bool] = mapped_column(Boolean, server_default=text("true"))
    is_default: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    created_by: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    deleted_at: Mapped[datetime | None]


class AiModel(UUIDPrimaryKey, Timestamps, Base):
    """The global model catalog with prices (global table, no RLS; written by migrations).

    Prices are micro-USD per million tokens: 3_000_000 = $3.00 / 1M tokens. A NULL
    price means "unknown" and the runner then records cost 0 [003 principle 4].
    """

    __tablename__ = "ai_models"
    __table_args__ = (
        UniqueConstraint("provider", "model"),
        check_in("provider", LlmProvider),
        *check_non_negative("input_price_micros_per_mtok", "output_price_micros_per_mtok"),
        CheckConstraint("context_window IS NULL OR context_window > 0", name="context_window_positive"),
        Index(
            "uq_ai_models_one_default_per_provider",
            "provider",
            unique=True,
            postgresql_where=text("is_default"),
        ),
    )

    provider: Mapped[str]
    model: Mapped[str]
    display_name: Mapped[str]
    description: Mapped[str | None]
    context_window: Mapped[int | None] = mapped_column(Integer)
    input_price_micros_per_mtok: Mapped[int | None] = mapped_column(BigInteger)
    output_price_micros_per_mtok: Mapped[int | None] = mapped_column(BigInteger)
    supports_tools: Mapped[bool] = mapped_column(Boolean, server_default=text("true"))
    is_default: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    released_at: Mapped[datetime | None]
    deprecated_at: Mapped[datetime | None]
    attributes: Mapped[dict[str, Any]] = mapped_column(server_default=text("'{}'::jsonb"))
