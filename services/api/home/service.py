"""Home rules: read the stored digest, add and close to-do items, usage and incident reads.

Sync functions over the request's org-scoped session; they never commit.
"""

from __future__ import annotations

import re
import uuid
from datetime import date

from sqlalchemy import func
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from services.api.core.errors import NotFound, ValidationFailed
from services.api.home import repository
from services.api.home.schemas import (
    AgentUsage,
    DailyBriefView,
    HomePrefs,
    TodoCreate,
    TodoView,
    UsageFigures,
    UsageView,
)
from switchboard.areas import area_slugs
from switchboard.db.daily_brief import HOME_SECTIONS, org_today, refresh_layout
from switchboard.db.models.autonomy import WorkspaceHomePrefs
from switchboard.db.models.brief import TodoSource
from switchboard.db.todos import add_todo, mark_todo_done
from switchboard.db.usage import month_start


class UnknownPin(ValidationFailed):
    code = "home_prefs_invalid"
    default_message = "pinned_sections must be digest sections and pinned_areas known areas"


_MONTH = re.compile(r"([0-9]{4})-(0[1-9]|1[0-2])")


def parse_month(value: str | None) -> date:
    """``YYYY-MM`` -> its first day; omitted -> the current (UTC) month.

    The pattern alone lets year ``0000`` through, which ``date`` refuses (years start at 1):
    that must be the same 422 as any other malformed month, not a ``ValueError`` and a 500.
    """
    if value is None:
        return month_start()
    match = _MONTH.fullmatch(value)
    try:
        if match is None:
            raise ValueError(value)
        return date(int(match.group(1)), int(match.group(2)), 1)
    except ValueError:
        raise ValidationFailed("month must be YYYY-MM (year 0001 to 9999)", details={"field": "month"}) from None


def daily_brief(session: Session, org_id: uuid.UUID, day: date | None) -> DailyBriefView:
    day = day or org_today(session, org_id)
    row = repository.daily_brief(session, org_id, day)
    if row is None:
        raise NotFound("No digest for this day yet", details={"date": day.isoformat()})
    return DailyBriefView(date=row.day, digest=row.digest, updated_at=row.updated_at)


def create_todo(session: Session, org_id: uuid.UUID, body: TodoCreate) -> TodoView:
    if body.conversation_id is not None and not repository.conversation_exists(session, org_id, body.conversation_id):
        raise NotFound("No such conversation")
    todo = add_todo(session, org_id, body.text, TodoSource.API, conversation_id=body.conversation_id)
    session.refresh(todo)
    return TodoView.model_validate(todo)


def complete_todo(session: Session, org_id: uuid.UUID, todo_id: uuid.UUID) -> TodoView:
    todo = mark_todo_done(session, org_id, todo_id)
    if todo is None:
        raise NotFound("No such to-do item")
    return TodoView.model_validate(todo)


def usage(session: Session, org_id: uuid.UUID, month: date) -> UsageView:
    org = repository.org_usage(session, org_id, month)
    figures = UsageFigures() if org is None else UsageFigures.model_validate(org, from_attributes=True)
    agents = [
        AgentUsage(
            agent_id=agent_id,
            agent_name=name,
            input_tokens=row.input_tokens,
            output_tokens=row.output_tokens,
            cost_micros=row.cost_micros,
            run_count=row.run_count,
        )
        for agent_id, row, name in repository.agent_usage(session, org_id, month)
    ]
    return UsageView(month=f"{month:%Y-%m}", organization=figures, agents=agents)


def home_prefs(session: Session, org_id: uuid.UUID) -> HomePrefs:
    row = session.get(WorkspaceHomePrefs, org_id)
    return HomePrefs() if row is None else HomePrefs(pinned_sections=row.pinned_sections, pinned_areas=row.pinned_areas)


def set_home_prefs(session: Session, org_id: uuid.UUID, body: HomePrefs) -> HomePrefs:
    """Store the pins (duplicates dropped) and re-order today's stored digest at once; later
    digests are composed with them."""
    sections, areas = list(dict.fromkeys(body.pinned_sections)), list(dict.fromkeys(body.pinned_areas))
    if not set(sections) <= set(HOME_SECTIONS) or not set(areas) <= set(area_slugs()):
        raise UnknownPin(
            details={
                "sections": sorted(set(sections) - set(HOME_SECTIONS)),
                "areas": sorted(set(areas) - set(area_slugs())),
            }
        )
    stmt = insert(WorkspaceHomePrefs).values(org_id=org_id, pinned_sections=sections, pinned_areas=areas)
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=[WorkspaceHomePrefs.org_id],
            set_={"pinned_sections": sections, "pinned_areas": areas, "updated_at": func.now()},
        )
    )
    refresh_layout(
        session,
        org_id,
        org_today(session, org_id),
        sections=HOME_SECTIONS,
        areas=area_slugs(),
        pinned_sections=sections,
        pinned_areas=areas,
    )
    return HomePrefs(pinned_sections=sections, pinned_areas=areas)
