"""``/api/v1/conversations``: read a conversation; hand it back to the agents after a handoff; wake its agent."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request

from services.api.conversations import service, wake
from services.api.conversations.schemas import ConversationView, HandbackResult, WakeRequest, WakeResult
from services.api.core.auth import Manager
from services.api.core.errors import Conflict, Forbidden, NotFound, Unauthorized, ValidationFailed, error_responses
from services.api.core.responses import Envelope
from switchboard.contracts import Serde
from switchboard.db.models.channels import Conversation

router = APIRouter(prefix="/api/v1", tags=["conversations"])


def _view(row: Conversation) -> ConversationView:
    return ConversationView(
        id=row.id,
        channel_session_id=row.channel_session_id,
        contact_id=row.contact_id,
        chat_id=row.chat_id,
        is_group=row.is_group,
        status=row.status,  # type: ignore[arg-type]
        assigned_user_id=row.assigned_user_id,
        handoff_at=row.handoff_at,
        last_message_at=row.last_message_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


@router.get(
    "/conversations/{conversation_id}",
    response_model=Envelope[ConversationView],
    responses=error_responses(Unauthorized, Forbidden, NotFound, ValidationFailed),
)
async def get_conversation(conversation_id: uuid.UUID, ctx: Manager) -> Envelope[ConversationView]:
    row = await ctx.session.run_sync(
        lambda s: service.get_conversation(s, org_id=ctx.org_id, conversation_id=conversation_id)
    )
    return Envelope(data=_view(row))


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
    return Envelope(data=HandbackResult(**_view(result.row).model_dump(), agent_woken=result.agent_woken))


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
