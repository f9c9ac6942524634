"""Slash commands handled at ingest, before dispatch [002 "I comandi slash"]: ``/todo <text>``.

A ``/todo`` message is never stored as a message nor sent to the agent: it adds
an item to the owner's to-do list (the Home digest) with the conversation it was
written in, and the delivery answers ``reason: slash_todo``. It works in
one-to-one chats from either side (the owner writing from the business phone,
or anyone writing to it — the item names the conversation, so the owner sees
who asked). Group chats are left alone.

Idempotency without a stored message: a repeated delivery of the same
``/todo`` finds the same *open* item in the same conversation and adds nothing
(the conversation row is locked first, so concurrent repeats serialize).

A malformed ``/todo`` (no text, too long) is ingested as an ordinary message: the
run answers it with what is wrong, before any model call (``services.runner.commands``).
Other commands pass through untouched: the runner handles them.
"""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.api.webhooks.schemas import WebhookResult
from switchboard.db.lookups import ChannelSessionRoute
from switchboard.db.models.brief import TodoSource, TodoStatus, WorkspaceTodo
from switchboard.db.models.channels import Conversation
from switchboard.db.todos import add_todo
from switchboard.observability.logging import get_logger
from switchboard.slash_commands import CommandName, ParseError, parse

log = get_logger(__name__)

TODO_ADDED = "slash_todo"


def handle_ingest_command(
    session: Session, *, route: ChannelSessionRoute, chat_id: str, text: str | None
) -> WebhookResult | None:
    """The delivery's result when ``text`` is a command handled at ingest; None to ingest it as a message."""
    if not text or not text.lstrip().startswith("/"):
        return None
    try:
        command = parse(text)
    except ParseError:
        return None  # written wrongly: ingested as a message, and the run answers what is wrong
    if command is None or command.name is not CommandName.TODO:
        return None
    conversation_id = _lock_conversation(session, route, chat_id)
    if _open_item_exists(session, route.org_id, conversation_id, command.text):
        return WebhookResult(message_id=None, dispatched=False, duplicate=True, reason=TODO_ADDED)
    add_todo(session, route.org_id, command.text, source=TodoSource.SLASH_COMMAND, conversation_id=conversation_id)
    log.info("todo added by slash command", extra={"organization_id": str(route.org_id)})
    return WebhookResult(message_id=None, dispatched=False, duplicate=False, reason=TODO_ADDED)


def _lock_conversation(session: Session, route: ChannelSessionRoute, chat_id: str) -> uuid.UUID | None:
    return session.scalars(
        select(Conversation.id)
        .where(
            Conversation.org_id == route.org_id,
            Conversation.channel_session_id == route.channel_session_id,
            Conversation.chat_id == chat_id,
        )
        .with_for_update()
    ).one_or_none()


def _open_item_exists(session: Session, org_id: uuid.UUID, conversation_id: uuid.UUID | None, text: str) -> bool:
    query = select(WorkspaceTodo.id).where(
        WorkspaceTodo.org_id == org_id,
        WorkspaceTodo.source == TodoSource.SLASH_COMMAND.value,
        WorkspaceTodo.status == TodoStatus.OPEN.value,
        WorkspaceTodo.text == text.strip(),
        WorkspaceTodo.conversation_id.is_(None)
        if conversation_id is None
        else WorkspaceTodo.conversation_id == conversation_id,
    )
    return session.scalars(query.limit(1)).first() is not None
