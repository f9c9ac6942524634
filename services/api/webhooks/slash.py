"""Slash commands handled at ingest, before dispatch [002 "I comandi slash"]: ``/todo``, ``/compact``, ``/handback``.

The owner's ``/todo`` (from the business phone) is never stored as a message nor
sent to the agent: it adds an item to the owner's to-do list (the Home digest) with
the conversation it was written in, and the delivery answers ``reason: slash_todo``.
A customer's ``/todo`` adds the same item — the item names the conversation, so the
owner sees who asked — and is also stored and dispatched like any message, so the
chat shows it and the agent answers it (``add_customer_todo``, after the message is
stored). Group chats are left alone.

Idempotency without a stored message: a repeated delivery of the same
``/todo`` finds the same *open* item in the same conversation and adds nothing
(the conversation row is locked first, so concurrent repeats serialize).

``/compact`` from the business's phone (``fromMe``) is never stored as a message nor sent to
the agent either: it asks the
runner to compact the thread summary now. The summarizer lives in the runner (it needs
the provider and the key), so ingest writes a ``run_requested`` straight to the outbox —
not a ``dispatch_requested``: no agent turn is wanted — for the agent version that last
ran in the conversation, with ``request_id = slash:compact:<message id>``. The runner
recognizes that id, folds every message not yet covered into the summary and ends the
run ``completed`` with no final text: nothing is sent to anyone. The run id is derived
from the channel message id, so a redelivered ``/compact`` is the same run (the runner
skips a run id it already recorded). A conversation no agent ever ran in has nothing a
summary could be made with: ``reason: slash_compact_nothing``. A customer's ``/compact`` is
an ordinary message: a summarization run is billed to the business, so a customer must not
be able to start one (the same rule as the runner's commands, docs/agent-context.md).

``/handback`` from the business's phone gives a conversation people took over back to the
agents (``services.api.webhooks.phone``); never stored nor sent to the agent either, and a
repeat finds nothing to hand back (``reason: slash_handback_nothing``).

A malformed ``/todo`` (no text, too long) is ingested as an ordinary message: the
run answers it with what is wrong, before any model call (``services.runner.commands``).
Other commands pass through untouched: the runner handles them.
"""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.api.webhooks.phone import HANDED_BACK, hand_back_from_phone
from services.api.webhooks.schemas import WebhookResult
from switchboard.contracts import RunRequested, Serde, Topics, WakeContext
from switchboard.contracts.enums import WakeReason
from switchboard.db.lookups import ChannelSessionRoute
from switchboard.db.models import AiAgentRun
from switchboard.db.models.brief import TodoSource, TodoStatus, WorkspaceTodo
from switchboard.db.models.channels import Conversation
from switchboard.db.outbox import OutboxBatch, enqueue_record
from switchboard.db.todos import add_todo
from switchboard.observability.logging import get_logger
from switchboard.slash_commands import COMPACT_REQUEST_PREFIX, CommandName, ParseError, parse

log = get_logger(__name__)

TODO_ADDED = "slash_todo"
COMPACT_REQUESTED = "slash_compact"
COMPACT_NOTHING = "slash_compact_nothing"
# Run ids of /compact runs: uuid5(namespace, "<org>:<channel session>:<channel message id>").
COMPACT_RUN_NAMESPACE = uuid.UUID("3c7d0f1e-9b7a-4f51-8a0e-5d2f61c4b9a7")


def looks_like_command(text: str | None) -> bool:
    """Whether ``text`` may be a slash command (the cheap test before any parsing or lookup)."""
    return text is not None and text.lstrip().startswith("/")


def handle_ingest_command(
    session: Session,
    *,
    route: ChannelSessionRoute,
    chat_id: str,
    text: str | None,
    serde: Serde | None = None,
    external_id: str = "",
    from_me: bool = False,
    outbox: OutboxBatch | None = None,
    request_id: str | None = None,
) -> WebhookResult | None:
    """The delivery's result when ``text`` is a command handled at ingest; None to ingest it as a message."""
    if not text or not looks_like_command(text):
        return None
    try:
        command = parse(text)
    except ParseError:
        return None  # written wrongly: ingested as a message, and the run answers what is wrong
    if command is not None and command.name is CommandName.HANDBACK:
        if not from_me or serde is None:
            return None  # a customer's /handback is plain text: only the business gives a chat back
        reason = hand_back_from_phone(
            session, outbox, route=route, chat_id=chat_id, serde=serde, request_id=request_id, external_id=external_id
        )
        return WebhookResult(message_id=None, dispatched=False, duplicate=reason != HANDED_BACK, reason=reason)
    if command is not None and command.name is CommandName.COMPACT:
        if not from_me or serde is None:
            return None  # a customer's /compact is plain text: only the business starts (billed) summarization
        return _request_compaction(session, route, chat_id, serde=serde, external_id=external_id)
    if command is None or command.name is not CommandName.TODO or not from_me:
        # A customer's /todo is a message like any other (stored, answered); its item is added
        # once the message is stored (``add_customer_todo``), with the conversation it created.
        return None
    conversation_id = _lock_conversation(session, route, chat_id)
    if _open_item_exists(session, route.org_id, conversation_id, command.text):
        return WebhookResult(message_id=None, dispatched=False, duplicate=True, reason=TODO_ADDED)
    add_todo(session, route.org_id, command.text, source=TodoSource.SLASH_COMMAND, conversation_id=conversation_id)
    log.info("todo added by slash command", extra={"organization_id": str(route.org_id)})
    return WebhookResult(message_id=None, dispatched=False, duplicate=False, reason=TODO_ADDED)


def add_customer_todo(session: Session, org_id: uuid.UUID, conversation_id: uuid.UUID, text: str | None) -> None:
    """A customer's well-formed ``/todo``, just stored as a new message: the owner's to-do item,
    linked to the conversation. Called once per stored message, so a redelivery adds nothing."""
    if not text or not text.lstrip().startswith("/"):
        return
    try:
        command = parse(text)
    except ParseError:
        return  # written wrongly: the run answers what is wrong
    if command is None or command.name is not CommandName.TODO:
        return
    if not _open_item_exists(session, org_id, conversation_id, command.text):
        add_todo(session, org_id, command.text, source=TodoSource.SLASH_COMMAND, conversation_id=conversation_id)
        log.info("todo added by a customer's slash command", extra={"organization_id": str(org_id)})


def _request_compaction(
    session: Session, route: ChannelSessionRoute, chat_id: str, *, serde: Serde, external_id: str
) -> WebhookResult:
    """Outbox a summarize-only ``run_requested`` for the agent version that last ran here."""
    nothing = WebhookResult(message_id=None, dispatched=False, duplicate=False, reason=COMPACT_NOTHING)
    conversation_id = _lock_conversation(session, route, chat_id)
    if conversation_id is None:
        return nothing
    last = session.execute(
        select(AiAgentRun.agent_id, AiAgentRun.agent_version_id, AiAgentRun.contact_id)
        .where(
            AiAgentRun.org_id == route.org_id,
            AiAgentRun.conversation_id == conversation_id,
            AiAgentRun.is_dry_run.is_(False),
        )
        .order_by(AiAgentRun.created_at.desc())
        .limit(1)
    ).one_or_none()
    if last is None or last.contact_id is None:
        return nothing
    key = f"{route.org_id}:{route.channel_session_id}:{external_id or uuid.uuid4()}"
    run_id = uuid.uuid5(COMPACT_RUN_NAMESPACE, key)
    record = RunRequested(
        event_id=run_id,
        org_id=route.org_id,
        request_id=f"{COMPACT_REQUEST_PREFIX}{external_id}"[:200],
        conversation_id=conversation_id,
        contact_id=last.contact_id,
        channel_session_id=route.channel_session_id,
        run_id=run_id,
        agent_id=last.agent_id,
        version_id=last.agent_version_id,
        wake_reason=WakeReason.USER_MESSAGE,
        wake_context=WakeContext(),
    )
    enqueue_record(session, Topics.RUN_REQUESTED, record, serde=serde)
    log.info("thread summary compaction requested", extra={"organization_id": str(route.org_id)})
    return WebhookResult(message_id=None, dispatched=False, duplicate=False, reason=COMPACT_REQUESTED)


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
