"""The record of what agents did: one row per run, one row per dispatcher decision."""

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
    CreatedAt,
    OrgScoped,
    Timestamps,
    UUIDPrimaryKey,
    check_in,
    check_non_negative,
    sql_literal_list,
)
from switchboard.db.enums import (
    ACTIVE_RUN_STATUSES,
    RUN_ROW_STATUSES,
    DispatchOutcome,
    ErrorFamily,
    LlmProvider,
    RunVitality,
    WakeReason,
)

# The name the application can match on an IntegrityError to mean "conversation busy".
ONE_ACTIVE_RUN_INDEX = "uq_ai_agent_runs_one_active_per_conversation"


class AiAgentRun(UUIDPrimaryKey, OrgScoped, Timestamps, Base):
    """One execution of one agent version, from pending to a terminal status.

    ``status`` is coarse; ``vitality`` and ``error_family`` say what really
    happened (``completed`` never claims the reply was delivered [002]).
    """

    __tablename__ = "ai_agent_runs"
    __table_args__ = (
        check_in("status", RUN_ROW_STATUSES),
        check_in("vitality", RunVitality),
        check_in("error_family", ErrorFamily),
        check_in("wake_reason", WakeReason),
        check_in("provider", LlmProvider),
        *check_non_negative("tokens_in", "tokens_out", "cost_micros", "latency_ms", "steps_count", "attempt"),
        CheckConstraint("jsonb_typeof(tool_calls) = 'array'", name="tool_calls_array"),
        CheckConstraint("parent_run_id IS NULL OR parent_run_id <> id", name="parent_not_self"),
        # Last line of defense of "one active run per conversation" [004 §3.4]; dry runs
        # (test mode) are exempt so tests never block a live conversation.
        Index(
            ONE_ACTIVE_RUN_INDEX,
            "conversation_id",
            unique=True,
            postgresql_where=text(f"status IN ({sql_literal_list(ACTIVE_RUN_STATUSES)}) AND NOT is_dry_run"),
        ),
        Index(None, "org_id", "created_at"),
        Index(None, "conversation_id", "created_at"),
        Index(None, "agent_id", "created_at"),
        # Recovery scan: active runs whose heartbeat lease expired.
        Index(
            "ix_ai_agent_runs_active_heartbeat",
            "heartbeat_at",
            postgresql_where=text(f"status IN ({sql_literal_list(ACTIVE_RUN_STATUSES)})"),
        ),
    )

    agent_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("ai_agents.id", ondelete="RESTRICT"))
    agent_version_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("ai_agent_versions.id", ondelete="RESTRICT"), index=True
    )
    conversation_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("conversations.id", ondelete="SET NULL"))
    contact_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("contacts.id", ondelete="SET NULL"), index=True)
    channel_session_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("channel_sessions.id", ondelete="SET NULL"), index=True
    )
    # The message that woke the run; all messages it answers (coalesced) are in the array.
    inbound_message_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("messages.id", ondelete="SET NULL"), index=True
    )
    inbound_message_ids: Mapped[list[uuid.UUID]] = mapped_column(server_default=text("'{}'::uuid[]"))
    outbound_message_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("messages.id", ondelete="SET NULL"), index=True
    )

    status: Mapped[str] = mapped_column(server_default=text("'pending'"))
    vitality: Mapped[str | None]
    error_family: Mapped[str | None]
    abort_reason: Mapped[str | None]
    error_code: Mapped[str | None]
    error_message: Mapped[str | None]

    wake_reason: Mapped[str] = mapped_column(server_default=text("'userMessage'"))
    wake_context: Mapped[dict[str, Any]] = mapped_column(server_default=text("'{}'::jsonb"))
    # Retry lineage [002]: a recovery re-dispatch is attempt + 1 with its parent's id.
    attempt: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    parent_run_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("ai_agent_runs.id", ondelete="SET NULL"), index=True
    )
    is_dry_run: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))

    # The provider and model actually used (the version may change later).
    provider: Mapped[str | None]
    model: Mapped[str | None]
    tokens_in: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    tokens_out: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    cost_micros: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    latency_ms: Mapped[int | None] = mapped_column(Integer)
    steps_count: Mapped[int] = mapped_column(Integer, server_default=text("0"))

    # The trace: [{step, tool_name, args, result, started_at, ended_at, error?}], persisted as it goes.
    tool_calls: Mapped[list[Any]] = mapped_column(server_default=text("'[]'::jsonb"))
    final_text: Mapped[str | None]
    # The composed prompt the model started from, pseudonymized (migration 0012, docs/agent-context.md).
    prompt: Mapped[dict[str, Any] | None]
    # Intent, urgency, category and tone of the inbound message(s) (migration 0017, docs/agent-context.md).
    classification: Mapped[dict[str, Any] | None]
    # A summary finalization must not overwrite with the model's last chatter [002].
    summary: Mapped[str | None]
    # Where the reply would go ({session, chat_id}); shown by dry runs, which never send.
    would_send_to: Mapped[dict[str, Any] | None]
    actions_executed: Mapped[list[Any]] = mapped_column(server_default=text("'[]'::jsonb"))
    actions_proposed: Mapped[list[Any]] = mapped_column(server_default=text("'[]'::jsonb"))

    # Lease of the runner holding the run; the dispatcher recovers runs whose lease lapsed.
    heartbeat_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    completed_at: Mapped[datetime | None]
    # When a runner finished after a newer attempt had closed the row (lost), and counted
    # what that closing had not; a retry of the same late finish sees its instant (0030).
    late_finished_at: Mapped[datetime | None]

    parent_run: Mapped[AiAgentRun | None] = relationship(
        remote_side="AiAgentRun.id", foreign_keys=[parent_run_id], lazy="raise"
    )


class DispatchDecision(UUIDPrimaryKey, OrgScoped, CreatedAt, Base):
    """Every decision the dispatcher takes on a dispatch request or a run, for audit and metrics.

    Written by the dispatcher's decision sink from the ``dispatch_decisions`` topic.
    Idempotent per ``decision_id`` (the record's event id, derived from the dispatch and
    the outcome): a decision replayed or recomputed after a crash is stored once
    (``ON CONFLICT DO NOTHING``). One dispatch may carry several decisions over time
    (``rate_limited`` then ``dispatched``; ``recovered`` at attempt 2 and 3).
    """

    __tablename__ = "dispatch_decisions"
    __table_args__ = (
        check_in("outcome", DispatchOutcome),
        check_in("wake_reason", WakeReason),
        UniqueConstraint("decision_id"),
        CheckConstraint("outcome <> 'dispatched' OR run_id IS NOT NULL", name="dispatched_has_run"),
        Index(None, "org_id", "created_at"),
        # The no_match rate per org [004 §8.2].
        Index(None, "org_id", "outcome", "created_at"),
        Index(None, "conversation_id", "created_at"),
    )

    # The event id of the dispatch_decisions record: the idempotency key of the sink.
    decision_id: Mapped[uuid.UUID] = mapped_column(server_default=text("gen_random_uuid()"))
    # The id of the dispatch_requested event this decision answers (for run decisions, the run's first).
    dispatch_event_id: Mapped[uuid.UUID] = mapped_column(index=True)
    outcome: Mapped[str]
    conversation_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("conversations.id", ondelete="SET NULL"))
    inbound_message_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("messages.id", ondelete="SET NULL"), index=True
    )
    agent_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("ai_agents.id", ondelete="SET NULL"), index=True)
    agent_version_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("ai_agent_versions.id", ondelete="SET NULL"), index=True
    )
    # Not a foreign key: the decision is recorded before (or without) the run row existing.
    run_id: Mapped[uuid.UUID | None] = mapped_column(index=True)
    wake_reason: Mapped[str] = mapped_column(server_default=text("'userMessage'"))
    is_dry_run: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    # Why: candidates considered, filter that rejected them, busy run id, budget figures...
    details: Mapped[dict[str, Any]] = mapped_column(server_default=text("'{}'::jsonb"))
