"""Slash-command state (docs/agent-context.md "Slash commands"), migration 0015.

- ``conversation_modes``: a conversation switched to plan mode by ``/plan`` (no row: reply mode);
- ``conversation_goals``: autonomous work of ``/goal`` / ``/loop``, carried across runs (segments)
  with its cost budget and spend;
- ``agent_skills``: skill bodies by name, per org (``/skill:<name>`` makes one the turn's directive).
"""

from __future__ import annotations

import uuid
from enum import StrEnum

from sqlalchemy import BigInteger, CheckConstraint, ForeignKey, Index, UniqueConstraint
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Mapped, mapped_column

from switchboard.db.base import Base, OrgScoped, Timestamps, UUIDPrimaryKey


class ConversationMode(StrEnum):
    PLAN = "plan"


class GoalKind(StrEnum):
    GOAL = "goal"
    LOOP = "loop"


class GoalStatus(StrEnum):
    ACTIVE = "active"
    DONE = "done"
    BUDGET_SPENT = "budget_spent"
    STOPPED = "stopped"


class ConversationModeRow(OrgScoped, Timestamps, Base):
    """The run mode a conversation was switched to, for this turn and every later one."""

    __tablename__ = "conversation_modes"
    __table_args__ = (
        UniqueConstraint("org_id", "conversation_id"),
        CheckConstraint("mode IN ('plan')", name="mode"),
    )

    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True
    )
    mode: Mapped[str]
    set_by_run_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("ai_agent_runs.id", ondelete="SET NULL"), index=True
    )


class ConversationGoal(UUIDPrimaryKey, OrgScoped, Timestamps, Base):
    """One ``/goal`` or ``/loop``: its budget, spend and segments (one segment = one run)."""

    __tablename__ = "conversation_goals"
    __table_args__ = (
        Index("ix_conversation_goals_org_id_conversation_id", "org_id", "conversation_id"),
        Index(
            "uq_conversation_goals_one_active",
            "conversation_id",
            unique=True,
            postgresql_where=sql_text("status = 'active'"),
        ),
        CheckConstraint("kind IN ('goal', 'loop')", name="kind"),
        CheckConstraint("status IN ('active', 'done', 'budget_spent', 'stopped')", name="status"),
        CheckConstraint(
            "budget_micros > 0 AND segment_budget_micros > 0 AND spent_micros >= 0 AND segments >= 0",
            name="amounts",
        ),
        CheckConstraint("length(goal) BETWEEN 1 AND 4000", name="goal_length"),
    )

    conversation_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"), index=True)
    agent_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("ai_agents.id", ondelete="CASCADE"), index=True)
    version_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("ai_agent_versions.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str]
    goal: Mapped[str]
    status: Mapped[str] = mapped_column(server_default=sql_text("'active'"))
    budget_micros: Mapped[int] = mapped_column(BigInteger)
    segment_budget_micros: Mapped[int] = mapped_column(BigInteger)
    spent_micros: Mapped[int] = mapped_column(BigInteger, server_default=sql_text("0"))
    segments: Mapped[int] = mapped_column(server_default=sql_text("0"))
    # The run whose /goal or /loop started it (unique: a redelivered run starts nothing twice).
    started_by_run_id: Mapped[uuid.UUID] = mapped_column(unique=True)
    last_run_id: Mapped[uuid.UUID | None]
    end_reason: Mapped[str | None]


class AgentSkill(UUIDPrimaryKey, OrgScoped, Timestamps, Base):
    """A skill's body; versions grant skills by name (``ai_agent_versions.skills``)."""

    __tablename__ = "agent_skills"
    __table_args__ = (
        UniqueConstraint("org_id", "name"),
        CheckConstraint("length(body) BETWEEN 1 AND 20000", name="body_length"),
        CheckConstraint("name ~ '^[a-z0-9][a-z0-9_.\\-]{0,63}$'", name="name_format"),
    )

    name: Mapped[str]
    body: Mapped[str]
