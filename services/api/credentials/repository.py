"""All SQL of the credentials domain (sync Session; the API calls it through ``run_sync``).

Every query filters by org in code as well as by row-level security, and
"live" means not deleted: deleted credentials are tombstones kept for history.
"""

from __future__ import annotations

import uuid

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from switchboard.db.enums import AgentVersionStatus
from switchboard.db.models.agents import AiAgentVersion, AiProviderCredential


def live(
    session: Session, org_id: uuid.UUID, credential_id: uuid.UUID, *, lock: bool = False
) -> AiProviderCredential | None:
    """A live credential; ``lock`` takes its row lock (DELETE, and validation results)."""
    query = select(AiProviderCredential).where(
        AiProviderCredential.org_id == org_id,
        AiProviderCredential.id == credential_id,
        AiProviderCredential.deleted_at.is_(None),
    )
    if lock:
        query = query.with_for_update()
    return session.scalars(query).one_or_none()


def list_live(session: Session, org_id: uuid.UUID, provider: str | None) -> list[AiProviderCredential]:
    query = select(AiProviderCredential).where(
        AiProviderCredential.org_id == org_id, AiProviderCredential.deleted_at.is_(None)
    )
    if provider is not None:
        query = query.where(AiProviderCredential.provider == provider)
    return list(session.scalars(query.order_by(AiProviderCredential.created_at, AiProviderCredential.id)))


def label_taken(session: Session, org_id: uuid.UUID, provider: str, label: str) -> bool:
    return (
        session.scalars(
            select(AiProviderCredential.id).where(
                AiProviderCredential.org_id == org_id,
                AiProviderCredential.provider == provider,
                AiProviderCredential.label == label,
                AiProviderCredential.deleted_at.is_(None),
            )
        ).first()
        is not None
    )


def clear_default(session: Session, org_id: uuid.UUID, provider: str) -> None:
    """The provider's current default steps down (a new default is being inserted)."""
    session.execute(
        update(AiProviderCredential)
        .where(
            AiProviderCredential.org_id == org_id,
            AiProviderCredential.provider == provider,
            AiProviderCredential.is_default,
        )
        .values(is_default=False)
        .execution_options(synchronize_session=False)
    )


def published_versions_using(session: Session, org_id: uuid.UUID, credential_id: uuid.UUID) -> list[AiAgentVersion]:
    return list(
        session.scalars(
            select(AiAgentVersion)
            .where(
                AiAgentVersion.org_id == org_id,
                AiAgentVersion.credential_id == credential_id,
                AiAgentVersion.status == AgentVersionStatus.PUBLISHED.value,
            )
            .order_by(AiAgentVersion.agent_id)
        )
    )
