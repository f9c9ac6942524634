"""Pausing an agent: the one state change both a person (the API) and a budget (the brief) make.

The pause clears ``published_version_id`` [004 §4.3], supersedes the published version,
audits, and writes a ``published`` record with ``change=paused`` to the outbox in the
caller's transaction — the record is what makes the dispatcher stop choosing the agent.
Callers lock the agent row first (:func:`lock_agent`) and never commit here.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from switchboard.contracts import Serde
from switchboard.contracts.enums import PublishedChange
from switchboard.contracts.records import AgentPublished, AgentVersionSnapshot
from switchboard.contracts.topics import Topics
from switchboard.db.audit import record_audit
from switchboard.db.enums import ActorKind, AgentPauseReason, AgentVersionStatus
from switchboard.db.models.agents import AiAgent, AiAgentVersion
from switchboard.db.outbox import enqueue_record

# Builds the record's version snapshot (the API has the full builder); None leaves it out.
SnapshotFn = Callable[[AiAgent, AiAgentVersion], AgentVersionSnapshot | None]


def lock_agent(session: Session, org_id: uuid.UUID, agent_id: uuid.UUID) -> AiAgent | None:
    """The agent row locked until commit, re-read from the database (never a stale identity-map copy).

    The one lock every agent write takes (the API's publish/pause/edit and the brief's budget
    pause), so they serialize. ``FOR NO KEY UPDATE``, not ``FOR UPDATE``: it excludes every
    other writer of the agent but not the ``FOR KEY SHARE`` that inserting a run (a foreign key
    to the agent) takes, so a publish never holds up the dispatcher recording runs.
    """
    return session.scalars(
        select(AiAgent)
        .where(AiAgent.org_id == org_id, AiAgent.id == agent_id)
        .with_for_update(key_share=True)
        .execution_options(populate_existing=True)
    ).one_or_none()


def supersede_published(
    session: Session, org_id: uuid.UUID, agent_id: uuid.UUID, *, at: datetime, keep: uuid.UUID | None = None
) -> list[uuid.UUID]:
    """Every ``published`` version of the agent (but ``keep``) -> ``superseded``; returns their ids.

    Set-based rather than "the pointer's version": it also heals a row left
    ``published`` by any other writer, so the one-published-per-agent index holds.
    """
    query = (
        update(AiAgentVersion)
        .where(
            AiAgentVersion.org_id == org_id,
            AiAgentVersion.agent_id == agent_id,
            AiAgentVersion.status == AgentVersionStatus.PUBLISHED.value,
        )
        .values(status=AgentVersionStatus.SUPERSEDED.value, superseded_at=at, updated_at=at)
        .returning(AiAgentVersion.id)
        .execution_options(synchronize_session="fetch")
    )
    if keep is not None:
        query = query.where(AiAgentVersion.id != keep)
    return list(session.scalars(query))


def _clock_now(session: Session) -> datetime:
    """``clock_timestamp()`` read under the agent lock, so changes of one agent stay ordered."""
    value: datetime = session.execute(select(func.clock_timestamp())).scalar_one()
    return value


def pause_agent(
    session: Session,
    serde: Serde,
    agent: AiAgent,
    *,
    reason: AgentPauseReason,
    audit_action: str,
    actor_user_id: uuid.UUID | None,
    request_id: str | None,
    actor_kind: ActorKind = ActorKind.USER,
    snapshot: SnapshotFn | None = None,
    details: dict[str, object] | None = None,
) -> AgentPublished:
    """Pause a locked, live agent (``published_version_id`` set; the caller checks) and announce it.

    A budget pause passes ``actor_kind=SYSTEM`` and no user. Returns the enqueued record.
    """
    previous = agent.published_version_id
    if previous is None:
        raise ValueError("only a published agent can be paused")
    now = _clock_now(session)
    supersede_published(session, agent.org_id, agent.id, at=now)
    agent.published_version_id = None
    agent.paused_at = now
    agent.pause_reason = reason.value
    session.flush()
    paused = session.scalars(
        select(AiAgentVersion).where(AiAgentVersion.org_id == agent.org_id, AiAgentVersion.id == previous)
    ).one_or_none()
    record_audit(
        session,
        org_id=agent.org_id,
        action=audit_action,
        actor_user_id=actor_user_id,
        actor_kind=actor_kind,
        target_type="ai_agent",
        target_id=agent.id,
        request_id=request_id,
        details={"version_id": previous, "reason": reason.value, **(details or {})},
    )
    record = AgentPublished(
        org_id=agent.org_id,
        request_id=request_id or None,
        agent_id=agent.id,
        change=PublishedChange.PAUSED,
        version=None if paused is None or snapshot is None else snapshot(agent, paused),
        previous_version_id=previous,
        changed_by_user_id=actor_user_id,
    )
    enqueue_record(session, Topics.PUBLISHED, record, serde=serde)
    return record
