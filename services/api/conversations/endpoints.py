"""``/api/v1/conversations``: the inbox — list conversations, read one with its messages and the
dispatcher's decisions on it (``/dispatch-decisions`` for the whole org); take one over from
the agents, hand one back to them; wake its agent. Everything needs ``manager`` (customers' words)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response

from services.api.contacts import service as contacts_service
from services.api.contacts.schemas import ContactSummary
from services.api.conversations import commands, reading, replies, service, wake
from services.api.conversations.schemas import (
    CommandResult,
    ConversationView,
    DecisionView,
    HandbackResult,
    MessageView,
    SendCommand,
    SendMessage,
    WakeRequest,
    WakeResult,
)
from services.api.core.auth import Manager
from services.api.core.errors import Conflict, Forbidden, NotFound, Unauthorized, ValidationFailed, error_responses
from services.api.core.pagination import DEFAULT_LIMIT, MAX_LIMIT, decode_cursor, encode_cursor
from services.api.core.responses import Envelope, Page
from switchboard.contracts import Serde
from switchboard.db.models.channels import Contact, Conversation

router = APIRouter(prefix="/api/v1", tags=["conversations"])


def _view(row: Conversation, contacts: Mapping[uuid.UUID, Contact]) -> ConversationView:
    contact = contacts.get(row.contact_id) if row.contact_id is not None else None
    return ConversationView(
        id=row.id,
        channel_session_id=row.channel_session_id,
        contact_id=row.contact_id,
        contact=None if contact is None else ContactSummary.model_validate(contact, from_attributes=True),
        chat_id=row.chat_id,
        is_group=row.is_group,
        status=row.status,  # type: ignore[arg-type]
        assigned_user_id=row.assigned_user_id,
        handoff_at=row.handoff_at,
        last_message_at=row.last_message_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


async def _views(ctx: Manager, rows: Sequence[Conversation]) -> list[ConversationView]:
    """The rows with who each is with: their contacts in one query."""
    contacts = await ctx.session.run_sync(
        lambda s: contacts_service.contacts_by_id(s, ctx.org_id, (r.contact_id for r in rows))
    )
    return [_view(r, contacts) for r in rows]


_LIST_ERRORS = error_responses(Unauthorized, Forbidden, NotFound, ValidationFailed)
CursorQuery = Annotated[str | None, Query(max_length=200)]
LimitQuery = Annotated[int, Query(ge=1, le=MAX_LIMIT)]


@router.get("/conversations", response_model=Page[ConversationView], responses=_LIST_ERRORS)
async def list_conversations(
    ctx: Manager,
    status: Annotated[str | None, Query(max_length=16, description="open, handoff (humans own it) or closed")] = None,
    channel_session_id: uuid.UUID | None = None,
    cursor: CursorQuery = None,
    limit: LimitQuery = DEFAULT_LIMIT,
) -> Page[ConversationView]:
    """Most recent activity first (the last message, else creation)."""
    before = decode_cursor(cursor)
    rows = await ctx.session.run_sync(
        lambda s: reading.list_conversations(
            s, ctx.org_id, status=status, channel_session_id=channel_session_id, limit=limit + 1, before=before
        )
    )
    page = rows[:limit]
    next_cursor = encode_cursor(reading.activity(page[-1]), page[-1].id) if len(rows) > limit else None
    return Page(data=await _views(ctx, page), next_cursor=next_cursor)


@router.get("/conversations/{conversation_id}/messages", response_model=Page[MessageView], responses=_LIST_ERRORS)
async def list_messages(
    conversation_id: uuid.UUID, ctx: Manager, cursor: CursorQuery = None, limit: LimitQuery = DEFAULT_LIMIT
) -> Page[MessageView]:
    """The conversation's messages, newest first."""
    before = decode_cursor(cursor)
    rows = await ctx.session.run_sync(
        lambda s: reading.list_messages(s, ctx.org_id, conversation_id, limit=limit + 1, before=before)
    )
    page = rows[:limit]
    next_cursor = encode_cursor(page[-1].occurred_at, page[-1].id) if len(rows) > limit else None
    return Page(data=[MessageView.model_validate(r) for r in page], next_cursor=next_cursor)


@router.get("/conversations/{conversation_id}/decisions", response_model=Page[DecisionView], responses=_LIST_ERRORS)
async def list_conversation_decisions(
    conversation_id: uuid.UUID,
    ctx: Manager,
    message_id: uuid.UUID | None = None,
    cursor: CursorQuery = None,
    limit: LimitQuery = DEFAULT_LIMIT,
) -> Page[DecisionView]:
    """Why each message of the conversation was answered, held back or left alone, newest first."""
    return await _decisions(
        ctx, conversation_id=conversation_id, message_id=message_id, outcome=None, cursor=cursor, limit=limit
    )


@router.get("/dispatch-decisions", response_model=Page[DecisionView], responses=_LIST_ERRORS)
async def list_dispatch_decisions(
    ctx: Manager,
    outcome: Annotated[str | None, Query(max_length=32, description="e.g. no_match, budget_exceeded")] = None,
    message_id: uuid.UUID | None = None,
    cursor: CursorQuery = None,
    limit: LimitQuery = DEFAULT_LIMIT,
) -> Page[DecisionView]:
    """The org's dispatcher decisions, newest first: ``outcome=no_match`` lists the messages no agent took."""
    return await _decisions(
        ctx, conversation_id=None, message_id=message_id, outcome=outcome, cursor=cursor, limit=limit
    )


async def _decisions(
    ctx: Manager,
    *,
    conversation_id: uuid.UUID | None,
    message_id: uuid.UUID | None,
    outcome: str | None,
    cursor: str | None,
    limit: int,
) -> Page[DecisionView]:
    before = decode_cursor(cursor)
    rows = await ctx.session.run_sync(
        lambda s: reading.list_decisions(
            s,
            ctx.org_id,
            conversation_id=conversation_id,
            message_id=message_id,
            outcome=outcome,
            limit=limit + 1,
            before=before,
        )
    )
    page = rows[:limit]
    next_cursor = encode_cursor(page[-1].created_at, page[-1].id) if len(rows) > limit else None
    return Page(data=[DecisionView.model_validate(r) for r in page], next_cursor=next_cursor)


@router.get(
    "/conversations/{conversation_id}",
    response_model=Envelope[ConversationView],
    responses=error_responses(Unauthorized, Forbidden, NotFound, ValidationFailed),
)
async def get_conversation(conversation_id: uuid.UUID, ctx: Manager) -> Envelope[ConversationView]:
    row = await ctx.session.run_sync(
        lambda s: service.get_conversation(s, org_id=ctx.org_id, conversation_id=conversation_id)
    )
    return Envelope(data=(await _views(ctx, [row]))[0])


@router.post(
    "/conversations/{conversation_id}:handback",
    response_model=Envelope[HandbackResult],
    responses=error_responses(Unauthorized, Forbidden, NotFound, Conflict, ValidationFailed),
)
async def hand_back(conversation_id: uuid.UUID, ctx: Manager, request: Request) -> Envelope[HandbackResult]:
    """Give a conversation the humans took over back to the agents (409 unless it is in `handoff`)."""
    serde: Serde = request.app.state.serde
    result = await ctx.session.run_sync(
        lambda s: service.hand_back(
            s,
            serde,
            org_id=ctx.org_id,
            conversation_id=conversation_id,
            actor_user_id=ctx.principal.user_id,
            request_id=ctx.request_id,
        )
    )
    [view] = await _views(ctx, [result.row])
    return Envelope(data=HandbackResult(**view.model_dump(), agent_woken=result.agent_woken))


@router.post(
    "/conversations/{conversation_id}:takeover",
    response_model=Envelope[ConversationView],
    responses=error_responses(Unauthorized, Forbidden, NotFound, Conflict, ValidationFailed),
)
async def take_over(conversation_id: uuid.UUID, ctx: Manager, request: Request) -> Envelope[ConversationView]:
    """The caller takes the conversation from the agents (status `handoff`, assigned to them); 409
    `conversation_closed` for a closed one. A run in flight is asked to stop at its next step, and
    whatever it still sends is withheld (the notifier marks it failed, `conversation_with_humans`)."""
    serde: Serde = request.app.state.serde
    row = await ctx.session.run_sync(
        lambda s: service.take_over(
            s,
            serde,
            org_id=ctx.org_id,
            conversation_id=conversation_id,
            actor_user_id=ctx.principal.user_id,
            request_id=ctx.request_id,
        )
    )
    return Envelope(data=(await _views(ctx, [row]))[0])


@router.post(
    "/conversations/{conversation_id}/messages",
    response_model=Envelope[MessageView],
    status_code=202,
    responses=error_responses(Unauthorized, Forbidden, NotFound, Conflict, ValidationFailed),
)
async def send_message(
    conversation_id: uuid.UUID,
    body: SendMessage,
    ctx: Manager,
    request: Request,
    response: Response,
    idempotency_key: Annotated[
        str | None,
        Header(alias="Idempotency-Key", max_length=200, description="A retry with the same key is the same message"),
    ] = None,
) -> Envelope[MessageView]:
    """A person answers the customer (409 unless the conversation is in `handoff`): stored `pending` and
    sent once by the notifier; `delivery_status` follows (sent, delivered, read or failed). A repeated
    `Idempotency-Key` answers `200` with the message already stored."""
    serde: Serde = request.app.state.serde
    sent = await ctx.session.run_sync(
        lambda s: replies.send_human_message(
            s,
            serde,
            org_id=ctx.org_id,
            conversation_id=conversation_id,
            text=body.text,
            actor_user_id=ctx.principal.user_id,
            idempotency_key=idempotency_key,
            request_id=ctx.request_id,
        )
    )
    if not sent.created:
        response.status_code = 200
    return Envelope(data=MessageView.model_validate(sent.message))


@router.post(
    "/conversations/{conversation_id}/commands",
    response_model=Envelope[CommandResult],
    status_code=202,
    responses=error_responses(Unauthorized, Forbidden, NotFound, Conflict, ValidationFailed),
)
async def send_command(
    conversation_id: uuid.UUID,
    body: SendCommand,
    ctx: Manager,
    request: Request,
    response: Response,
    idempotency_key: Annotated[
        str | None,
        Header(alias="Idempotency-Key", max_length=200, description="A retry with the same key is the same command"),
    ] = None,
) -> Envelope[CommandResult]:
    """Send `/plan`, `/goal`, `/loop` or `/skill:` to the conversation's agent without writing it into the
    customer's chat (where WhatsApp would show it to the customer); the agent acts on it as on the same
    command typed from the business phone. 409 `conversation_not_open` while people own the conversation."""
    serde: Serde = request.app.state.serde
    sent = await ctx.session.run_sync(
        lambda s: commands.send_command(
            s,
            serde,
            org_id=ctx.org_id,
            conversation_id=conversation_id,
            text=body.text,
            actor_user_id=ctx.principal.user_id,
            idempotency_key=idempotency_key,
            request_id=ctx.request_id,
        )
    )
    if not sent.created:
        response.status_code = 200
    return Envelope(
        data=CommandResult(conversation_id=conversation_id, message_id=sent.message_id, command=sent.command)
    )


@router.post(
    "/conversations/{conversation_id}:wake",
    response_model=Envelope[WakeResult],
    status_code=202,
    responses=error_responses(Unauthorized, Forbidden, NotFound, Conflict, ValidationFailed),
)
async def wake_conversation(
    conversation_id: uuid.UUID, body: WakeRequest, ctx: Manager, request: Request
) -> Envelope[WakeResult]:
    """Wake the conversation's agent for a non-message reason (docs/memory.md, "Wake reasons")."""
    serde: Serde = request.app.state.serde
    record = await ctx.session.run_sync(
        lambda s: wake.wake(
            s,
            serde,
            org_id=ctx.org_id,
            conversation_id=conversation_id,
            reason=body.reason,
            context=body.context,
            agent_id=body.agent_id,
            actor_user_id=ctx.principal.user_id,
            request_id=ctx.request_id,
        )
    )
    return Envelope(
        data=WakeResult(
            dispatch_id=record.event_id,
            conversation_id=record.conversation_id,
            reason=record.wake_reason,
            context=record.wake_context,
        )
    )
