"""The owner's ``/todo`` list: written by the slash command and the API, listed by the Home digest.

Adding or closing an item also refreshes the to-do section of today's stored digest
(``switchboard.db.daily_brief.refresh_todos``) in the same transaction, so the Home
shows it at once without waiting for the brief's next event.
"""

from __future__ import annotations

import uuid

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from switchboard.db.daily_brief import org_today, refresh_todos
from switchboard.db.models.brief import TodoSource, TodoStatus, WorkspaceTodo

MAX_TODO_CHARS = 2000


def add_todo(
    session: Session,
    org_id: uuid.UUID,
    text: str,
    source: TodoSource | str,
    conversation_id: uuid.UUID | None = None,
) -> WorkspaceTodo:
    """Add an open item (caller's transaction, scoped to ``org_id``); ``ValueError`` on empty text."""
    text = text.strip()
    if not text or len(text) > MAX_TODO_CHARS:
        raise ValueError(f"a to-do item needs 1 to {MAX_TODO_CHARS} characters")
    todo = WorkspaceTodo(org_id=org_id, text=text, source=TodoSource(source).value, conversation_id=conversation_id)
    session.add(todo)
    session.flush()
    refresh_todos(session, org_id, org_today(session, org_id))
    return todo


def mark_todo_done(session: Session, org_id: uuid.UUID, todo_id: uuid.UUID) -> WorkspaceTodo | None:
    """Close an item (idempotent: a done item stays as it was); None when the org has no such item."""
    session.execute(
        update(WorkspaceTodo)
        .where(
            WorkspaceTodo.org_id == org_id,
            WorkspaceTodo.id == todo_id,
            WorkspaceTodo.status == TodoStatus.OPEN.value,
        )
        .values(status=TodoStatus.DONE.value, done_at=func.now())
        .execution_options(synchronize_session=False)
    )
    todo = session.scalars(
        select(WorkspaceTodo)
        .where(WorkspaceTodo.org_id == org_id, WorkspaceTodo.id == todo_id)
        .execution_options(populate_existing=True)
    ).one_or_none()
    if todo is not None:
        refresh_todos(session, org_id, org_today(session, org_id))
    return todo
