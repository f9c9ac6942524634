"""All SQL of the agents domain (sync Session; the API calls it through ``run_sync``).

Every query filters by ``org_id`` in code as well as through row-level security.
Writers of an agent or of any of its versions first take the agent row with
``switchboard.db.agent_lifecycle.lock_agent`` (``SELECT ... FOR NO KEY UPDATE``): that one lock serializes publish,
pause, archive, save and draft edits of the same agent, so version numbers never
collide, a draft cannot change while it is being published, and the outbox rows
of one agent (the ``published`` key) follow commit order.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, select, tuple_
from sqlalchemy.orm import Session

from services.api.agents.schemas import AgentStatus
from switchboard.db.enums import AgentVersionStatus
from switchboard.db.models.agents import AiAgent, AiAgentVersion, AiModel, AiProviderCredential
from switchboard.db.models.channels import ChannelSession
from switchboard.db.models.tenancy import Organization


def clock_now(session: Session) -> datetime:
    """The database clock *now* (``clock_timestamp()``), read after taking the agent lock.

    Not ``now()``: that is the transaction's start, and a publish that waited on the
    lock would then be stamped before the one it supersedes. Read under the lock, the
    clock follows the order in which changes of one agent really happen.
    """
    value: datetime = session.execute(select(func.clock_timestamp())).scalar_one()
    return value


def agent(session: Session, org_id: uuid.UUID, agent_id: uuid.UUID) -> AiAgent | None:
    return session.scalars(select(AiAgent).where(AiAgent.org_id == org_id, AiAgent.id == agent_id)).one_or_none()


def agents(
    session: Session,
    org_id: uuid.UUID,
    *,
    limit: int,
    before: tuple[datetime, uuid.UUID] | None,
    status: AgentStatus | None,
    kind: str | None,
    include_archived: bool,
) -> list[AiAgent]:
    """Newest first; ``before`` is the (created_at, id) of the last agent of the previous page."""
    query = select(AiAgent).where(AiAgent.org_id == org_id)
    if before is not None:
        query = query.where(tuple_(AiAgent.created_at, AiAgent.id) < tuple_(*before))
    if kind is not None:
        query = query.where(AiAgent.kind == kind)
    live = AiAgent.archived_at.is_(None)
    if status is AgentStatus.ARCHIVED:
        query = query.where(AiAgent.archived_at.is_not(None))
    elif status is AgentStatus.PUBLISHED:
        query = query.where(live, AiAgent.published_version_id.is_not(None))
    elif status is AgentStatus.PAUSED:
        query = query.where(live, AiAgent.published_version_id.is_(None), AiAgent.paused_at.is_not(None))
    elif status is AgentStatus.DRAFT:
        query = query.where(live, AiAgent.published_version_id.is_(None), AiAgent.paused_at.is_(None))
    elif not include_archived:
        query = query.where(live)
    query = query.order_by(AiAgent.created_at.desc(), AiAgent.id.desc()).limit(limit)
    return list(session.scalars(query))


def latest_drafts(session: Session, org_id: uuid.UUID, agent_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, uuid.UUID]:
    """agent id -> id of its newest draft version, for the agents that have one."""
    if not agent_ids:
        return {}
    ranked = (
        select(
            AiAgentVersion.agent_id,
            AiAgentVersion.id,
            func.row_number()
            .over(partition_by=AiAgentVersion.agent_id, order_by=AiAgentVersion.version_number.desc())
            .label("rank"),
        )
        .where(
            AiAgentVersion.org_id == org_id,
            AiAgentVersion.agent_id.in_(agent_ids),
            AiAgentVersion.status == AgentVersionStatus.DRAFT.value,
        )
        .subquery()
    )
    rows = session.execute(select(ranked.c.agent_id, ranked.c.id).where(ranked.c.rank == 1))
    return {agent_id: version_id for agent_id, version_id in rows}


def latest_version_numbers(session: Session, org_id: uuid.UUID, agent_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, int]:
    if not agent_ids:
        return {}
    rows = session.execute(
        select(AiAgentVersion.agent_id, func.max(AiAgentVersion.version_number))
        .where(AiAgentVersion.org_id == org_id, AiAgentVersion.agent_id.in_(agent_ids))
        .group_by(AiAgentVersion.agent_id)
    )
    return {agent_id: number for agent_id, number in rows}


def version(
    session: Session, org_id: uuid.UUID, agent_id: uuid.UUID, version_id: uuid.UUID, *, lock: bool = False
) -> AiAgentVersion | None:
    query = select(AiAgentVersion).where(
        AiAgentVersion.org_id == org_id, AiAgentVersion.agent_id == agent_id, AiAgentVersion.id == version_id
    )
    if lock:
        query = query.with_for_update(key_share=True).execution_options(populate_existing=True)
    return session.scalars(query).one_or_none()


def versions(
    session: Session, org_id: uuid.UUID, agent_id: uuid.UUID, *, limit: int, below_number: int | None
) -> list[AiAgentVersion]:
    """Newest (highest number) first; ``below_number`` continues after the previous page."""
    query = select(AiAgentVersion).where(AiAgentVersion.org_id == org_id, AiAgentVersion.agent_id == agent_id)
    if below_number is not None:
        query = query.where(AiAgentVersion.version_number < below_number)
    return list(session.scalars(query.order_by(AiAgentVersion.version_number.desc()).limit(limit)))


def latest_version(session: Session, org_id: uuid.UUID, agent_id: uuid.UUID) -> AiAgentVersion | None:
    return session.scalars(
        select(AiAgentVersion)
        .where(AiAgentVersion.org_id == org_id, AiAgentVersion.agent_id == agent_id)
        .order_by(AiAgentVersion.version_number.desc())
        .limit(1)
    ).one_or_none()


def last_published_version(session: Session, org_id: uuid.UUID, agent_id: uuid.UUID) -> AiAgentVersion | None:
    """The version published most recently, whatever its status now (for pause/archive records)."""
    return session.scalars(
        select(AiAgentVersion)
        .where(
            AiAgentVersion.org_id == org_id,
            AiAgentVersion.agent_id == agent_id,
            AiAgentVersion.published_at.is_not(None),
        )
        .order_by(AiAgentVersion.published_at.desc(), AiAgentVersion.version_number.desc())
        .limit(1)
    ).one_or_none()


def next_version_number(session: Session, org_id: uuid.UUID, agent_id: uuid.UUID) -> int:
    """max + 1; callers hold the agent lock, so two saves never compute the same number."""
    current = session.execute(
        select(func.max(AiAgentVersion.version_number)).where(
            AiAgentVersion.org_id == org_id, AiAgentVersion.agent_id == agent_id
        )
    ).scalar_one()
    return int(current or 0) + 1


def catalog_model(session: Session, provider: str, model: str) -> AiModel | None:
    return session.scalars(select(AiModel).where(AiModel.provider == provider, AiModel.model == model)).one_or_none()


def credential(session: Session, org_id: uuid.UUID, credential_id: uuid.UUID) -> AiProviderCredential | None:
    return session.scalars(
        select(AiProviderCredential).where(
            AiProviderCredential.org_id == org_id, AiProviderCredential.id == credential_id
        )
    ).one_or_none()


def channel_session(session: Session, org_id: uuid.UUID, channel_session_id: uuid.UUID) -> ChannelSession | None:
    return session.scalars(
        select(ChannelSession).where(ChannelSession.org_id == org_id, ChannelSession.id == channel_session_id)
    ).one_or_none()


def org_time_zone(session: Session, org_id: uuid.UUID) -> str:
    """The org's IANA zone (business hours default to it)."""
    return session.scalar(select(Organization.time_zone).where(Organization.id == org_id)) or "UTC"
