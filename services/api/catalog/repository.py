"""All SQL of the catalog domain. ``ai_models`` is global (no row-level security) and read-only to the app."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from switchboard.db.enums import LlmProvider
from switchboard.db.models.agents import AiModel


def models(session: Session, *, provider: LlmProvider | None, include_deprecated: bool) -> list[AiModel]:
    query = select(AiModel)
    if provider is not None:
        query = query.where(AiModel.provider == provider.value)
    if not include_deprecated:
        query = query.where(AiModel.deprecated_at.is_(None))
    return list(session.scalars(query.order_by(AiModel.provider, AiModel.is_default.desc(), AiModel.model)))


def offered_counts(session: Session) -> dict[str, tuple[int, str | None]]:
    """Per provider: (models not deprecated, the default model id or None)."""
    rows = session.execute(
        select(
            AiModel.provider,
            func.count(),
            func.max(AiModel.model).filter(AiModel.is_default),
        )
        .where(AiModel.deprecated_at.is_(None))
        .group_by(AiModel.provider)
    ).all()
    return {provider: (int(count), default) for provider, count, default in rows}
