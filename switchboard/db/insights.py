"""Idempotent insight upsert: re-running an analysis refreshes what it found but
never undoes what the owner did with it [000 §7: seen/dismissed/actioned survive]."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from sqlalchemy import Boolean, func, literal_column
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from switchboard.contracts import Insight, SuggestedAction
from switchboard.contracts.enums import InsightKind as ContractInsightKind
from switchboard.contracts.enums import InsightStatus as ContractInsightStatus
from switchboard.db.enums import InsightKind, InsightSeverity, InsightStatus
from switchboard.db.models.autonomy import WorkspaceInsight


@dataclass(frozen=True, slots=True)
class InsightUpsert:
    """The insight row after the upsert: its id, its (possibly preserved) status, and
    whether this call created it."""

    id: uuid.UUID
    status: InsightStatus
    created: bool


def upsert_insight(
    session: Session,
    *,
    org_id: uuid.UUID,
    dedupe_key: str,
    area: str,
    title: str,
    body: str | None = None,
    kind: InsightKind = InsightKind.INSIGHT,
    severity: InsightSeverity = InsightSeverity.INFO,
    suggested_actions: Sequence[dict[str, Any]] = (),
    insight_date: date | None = None,
    run_id: uuid.UUID | None = None,
    agent_decision_id: uuid.UUID | None = None,
) -> InsightUpsert:
    """Insert the insight as ``open``, or refresh the existing one with the same dedupe key.

    The refresh rewrites the content (title, body, severity, suggested actions,
    date, producing run) and leaves ``status`` and its audit fields alone, so a
    seen, dismissed or actioned insight stays that way; an open one stays open.
    """
    values: dict[str, Any] = {
        "org_id": org_id,
        "dedupe_key": dedupe_key,
        "area": area,
        "kind": str(kind),
        "severity": str(severity),
        "title": title,
        "body": body,
        "suggested_actions": list(suggested_actions),
        "run_id": run_id,
        "agent_decision_id": agent_decision_id,
        "status": str(InsightStatus.NEW),
    }
    if insight_date is not None:
        values["insight_date"] = insight_date
    stmt = insert(WorkspaceInsight).values(**values)
    refreshed = ["area", "kind", "severity", "title", "body", "suggested_actions", "run_id"]
    set_: dict[str, Any] = {name: stmt.excluded[name] for name in refreshed}
    set_["insight_date"] = stmt.excluded.insight_date
    # Keep a link to a decision once made, unless this run produced a new one.
    set_["agent_decision_id"] = func.coalesce(stmt.excluded.agent_decision_id, WorkspaceInsight.agent_decision_id)
    set_["updated_at"] = func.now()
    row = session.execute(
        stmt.on_conflict_do_update(
            index_elements=[WorkspaceInsight.org_id, WorkspaceInsight.dedupe_key], set_=set_
        ).returning(
            WorkspaceInsight.id,
            WorkspaceInsight.status,
            # xmax is 0 only for a row version this statement inserted.
            literal_column("(xmax = 0)", Boolean).label("created"),
        )
    ).one()
    return InsightUpsert(id=row.id, status=InsightStatus(row.status), created=bool(row.created))


def status_record(row: WorkspaceInsight, status: str, request_id: str | None, **extra: Any) -> Insight:
    """The ``insights`` record that tells consumers (the brief, the notifier) an insight's new status.

    ``extra``: fields of the record the row does not hold (the agent or conversation of an action)."""
    return Insight(
        org_id=row.org_id,
        request_id=request_id or None,
        insight_id=row.id,
        insight_key=row.dedupe_key,
        insight_date=row.insight_date,
        kind=ContractInsightKind(row.kind),
        area=row.area,
        title=row.title,
        body=row.body or "",
        status=ContractInsightStatus(status),
        suggested_actions=tuple(SuggestedAction.model_validate(a) for a in row.suggested_actions),
        run_id=row.run_id,
        **extra,
    )
