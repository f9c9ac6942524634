"""What the brief (which writes ``workspace_daily_briefs``) and the to-do writers share.

- The org-local day: digests are per org and *local* day (``organizations.time_zone``).
- A per (org, day) transaction lock: whoever rewrites a stored digest takes it first,
  so the brief's full recompute and a to-do refresh never overwrite each other.
- The ``todo`` items of kind ``todo`` (the owner's own list), in one shape for both.
- The layout: which sections and areas come first (``workspace_home_prefs``), applied the
  same way when the brief composes a digest and when the owner changes the pins.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import date, datetime
from typing import Any, Final
from zoneinfo import ZoneInfo

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from switchboard.db.models.autonomy import WorkspaceDailyBrief
from switchboard.db.models.brief import TodoStatus, WorkspaceTodo
from switchboard.db.models.tenancy import Organization
from switchboard.time_zones import load_time_zone

# The digest's sections in their default order (services/brief/digest.yaml lists the same;
# tests/unit/brief checks they agree).
HOME_SECTIONS: Final = ("pulse", "done", "todo", "planets")
TODO_KIND = "todo"
TODO_DONE_PATH = "/api/v1/home/todos/{id}:done"
_UTC = ZoneInfo("UTC")


def zone(name: str | None) -> ZoneInfo:
    """The org's zone; an unknown name falls back to UTC rather than stopping the digest."""
    return load_time_zone(name or "UTC") or _UTC


def org_zone(session: Session, org_id: uuid.UUID) -> ZoneInfo:
    name = session.scalars(select(Organization.time_zone).where(Organization.id == org_id)).one_or_none()
    return zone(name)


def local_day(moment: datetime, tz: ZoneInfo) -> date:
    """The calendar day of ``moment`` in ``tz`` (naive datetimes are taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_UTC)
    return moment.astimezone(tz).date()


def org_today(session: Session, org_id: uuid.UUID) -> date:
    now: datetime = session.execute(select(func.now())).scalar_one()
    return local_day(now, org_zone(session, org_id))


def lock_day(session: Session, org_id: uuid.UUID, day: date) -> None:
    """Serialize writers of one org's digest of ``day`` until the transaction ends."""
    session.execute(
        text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"),
        {"key": f"daily_brief:{org_id}:{day.isoformat()}"},
    )


def todo_item(todo: WorkspaceTodo) -> dict[str, Any]:
    """One open ``/todo`` item as the digest lists it."""
    return {
        "kind": TODO_KIND,
        "id": str(todo.id),
        "text": todo.text,
        "source": todo.source,
        "conversation_id": None if todo.conversation_id is None else str(todo.conversation_id),
        "created_at": todo.created_at.isoformat(),
        "links": {"done": TODO_DONE_PATH.format(id=todo.id)},
    }


def open_todo_items(session: Session, org_id: uuid.UUID) -> list[dict[str, Any]]:
    """Open items, oldest first (the order they were noted)."""
    rows = session.scalars(
        select(WorkspaceTodo)
        .where(WorkspaceTodo.org_id == org_id, WorkspaceTodo.status == TodoStatus.OPEN.value)
        .order_by(WorkspaceTodo.created_at, WorkspaceTodo.id)
    )
    return [todo_item(row) for row in rows]


def refresh_todos(session: Session, org_id: uuid.UUID, day: date) -> None:
    """Rewrite the ``todo`` items of the stored digest of ``day``, if there is one.

    Without a stored digest nothing is written: the brief composes the day's digest,
    open items included, on its next event for the org.
    """
    row = _locked_digest(session, org_id, day)
    if row is None:
        return
    digest = dict(row.digest)
    others = [item for item in digest.get("todo", []) if item.get("kind") != TODO_KIND]
    digest["todo"] = others + open_todo_items(session, org_id)
    row.digest = digest
    session.flush()


def pinned_first(default: Sequence[str], pinned: Sequence[str]) -> list[str]:
    """``default`` with the known ``pinned`` names first, in the order they were pinned."""
    known = [name for name in dict.fromkeys(pinned) if name in default]
    return [*known, *(name for name in default if name not in known)]


def refresh_layout(
    session: Session,
    org_id: uuid.UUID,
    day: date,
    *,
    sections: Sequence[str],
    areas: Sequence[str],
    pinned_sections: Sequence[str],
    pinned_areas: Sequence[str],
) -> None:
    """Re-order the stored digest of ``day`` for new pins (sections, then planets), if there is one.

    ``sections`` and ``areas`` are the default orders; a digest not stored yet gets the pins
    when the brief composes it."""
    row = _locked_digest(session, org_id, day)
    if row is None:
        return
    digest = dict(row.digest)
    digest["sections"] = pinned_first(sections, pinned_sections)
    planets = {str(planet["area"]): planet for planet in digest.get("planets", [])}
    pinned = set(pinned_areas) & set(planets)
    order = pinned_first([*areas, *(a for a in planets if a not in areas)], pinned_areas)
    digest["planets"] = [{**planets[area], "pinned": area in pinned} for area in order if area in planets]
    row.digest = digest
    session.flush()


def _locked_digest(session: Session, org_id: uuid.UUID, day: date) -> WorkspaceDailyBrief | None:
    """The stored digest of ``day`` under the day lock (None when the brief has not composed it)."""
    lock_day(session, org_id, day)
    return session.scalars(
        select(WorkspaceDailyBrief)
        .where(WorkspaceDailyBrief.org_id == org_id, WorkspaceDailyBrief.day == day)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one_or_none()
