"""``/api/v1/memory/facts``: list what the agents remember (of one customer, or of the business),
teach a fact, forget one; ``/api/v1/conversations/{id}/memory``: the thread summary and state
note a run of the conversation reads, each of which can be cleared. ``manager`` for all (facts
about customers are personal data); another org's fact, contact or conversation is 404."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from services.api.core.auth import Manager
from services.api.core.errors import Conflict, Forbidden, NotFound, Unauthorized, ValidationFailed, error_responses
from services.api.core.pagination import DEFAULT_LIMIT, MAX_LIMIT, decode_cursor, encode_cursor
from services.api.core.responses import Envelope, Page
from services.api.memory import service
from services.api.memory.schemas import ConversationMemoryView, FactView, NewFact, StateNoteView, SummaryView
from switchboard.db.models.memory import FactScope

router = APIRouter(prefix="/api/v1", tags=["memory"])

_ERRORS = error_responses(Unauthorized, Forbidden, NotFound, ValidationFailed, Conflict)


@router.get("/memory/facts", response_model=Page[FactView], responses=_ERRORS)
async def list_facts(
    ctx: Manager,
    contact_id: uuid.UUID | None = None,
    scope: FactScope | None = None,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
) -> Page[FactView]:
    """Most recently saved first."""
    before = decode_cursor(cursor)
    rows = await ctx.session.run_sync(
        lambda s: service.list_facts(s, ctx.org_id, contact_id=contact_id, scope=scope, limit=limit + 1, before=before)
    )
    page = rows[:limit]
    next_cursor = encode_cursor(page[-1].updated_at, page[-1].id) if len(rows) > limit else None
    return Page(data=[FactView.model_validate(r) for r in page], next_cursor=next_cursor)


@router.post("/memory/facts", response_model=Envelope[FactView], status_code=status.HTTP_201_CREATED, responses=_ERRORS)
async def teach_fact(body: NewFact, ctx: Manager) -> Envelope[FactView]:
    """Teach the agents a fact (`source: api`); the same fact again refreshes the same entry."""
    row = await ctx.session.run_sync(
        lambda s: service.teach_fact(
            s, ctx.org_id, body.fact, body.contact_id, actor_user_id=ctx.principal.user_id, request_id=ctx.request_id
        )
    )
    return Envelope(data=FactView.model_validate(row))


@router.delete("/memory/facts/{fact_id}", status_code=status.HTTP_204_NO_CONTENT, responses=_ERRORS)
async def forget_fact(fact_id: uuid.UUID, ctx: Manager) -> Response:
    """Forget it: no later run reads it."""
    await ctx.session.run_sync(
        lambda s: service.forget_fact(
            s, ctx.org_id, fact_id, actor_user_id=ctx.principal.user_id, request_id=ctx.request_id
        )
    )
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/conversations/{conversation_id}/memory", response_model=Envelope[ConversationMemoryView], responses=_ERRORS
)
async def conversation_memory(conversation_id: uuid.UUID, ctx: Manager) -> Envelope[ConversationMemoryView]:
    """The thread summary (older messages folded in) and the agents' state note; null when none yet."""
    summary, note = await ctx.session.run_sync(lambda s: service.conversation_memory(s, ctx.org_id, conversation_id))
    return Envelope(
        data=ConversationMemoryView(
            conversation_id=conversation_id,
            summary=None if summary is None else SummaryView.model_validate(summary),
            state_note=None if note is None else StateNoteView.model_validate(note),
        )
    )


@router.delete(
    "/conversations/{conversation_id}/memory/{part}", status_code=status.HTTP_204_NO_CONTENT, responses=_ERRORS
)
async def clear_memory(conversation_id: uuid.UUID, part: service.MemoryPart, ctx: Manager) -> Response:
    """Clear a wrong thread summary (`summary`) or the agents' state note (`state-note`): later runs no
    longer read it. Clearing what is not there is a 204 too."""
    await ctx.session.run_sync(
        lambda s: service.clear_memory(
            s, ctx.org_id, conversation_id, part, actor_user_id=ctx.principal.user_id, request_id=ctx.request_id
        )
    )
    return Response(status_code=status.HTTP_204_NO_CONTENT)
