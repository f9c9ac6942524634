"""``/api/v1/contacts``: list and search the org's customers, read one, correct its name, phone or
e-mail, erase one. Reading and correcting need ``manager`` (customers' personal data), erasing
``admin`` with MFA (it cannot be undone); another org's contact is 404."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query

from services.api.contacts import erasure, service
from services.api.contacts.schemas import ContactView, UpdateContact
from services.api.core.auth import AdminWrite, Manager
from services.api.core.errors import Conflict, Forbidden, NotFound, Unauthorized, ValidationFailed, error_responses
from services.api.core.pagination import DEFAULT_LIMIT, MAX_LIMIT, decode_cursor, encode_cursor
from services.api.core.responses import Envelope, Page

router = APIRouter(prefix="/api/v1", tags=["contacts"])

_ERRORS = error_responses(Unauthorized, Forbidden, NotFound, ValidationFailed, Conflict)


@router.get("/contacts", response_model=Page[ContactView], responses=_ERRORS)
async def list_contacts(
    ctx: Manager,
    q: Annotated[str | None, Query(max_length=200, description="part of the name, phone, e-mail or chat id")] = None,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
) -> Page[ContactView]:
    """Newest first."""
    before = decode_cursor(cursor)
    rows = await ctx.session.run_sync(
        lambda s: service.list_contacts(s, ctx.org_id, query=q, limit=limit + 1, before=before)
    )
    page = rows[:limit]
    next_cursor = encode_cursor(page[-1].created_at, page[-1].id) if len(rows) > limit else None
    return Page(data=[ContactView.model_validate(r, from_attributes=True) for r in page], next_cursor=next_cursor)


@router.get("/contacts/{contact_id}", response_model=Envelope[ContactView], responses=_ERRORS)
async def get_contact(contact_id: uuid.UUID, ctx: Manager) -> Envelope[ContactView]:
    row = await ctx.session.run_sync(lambda s: service.get_contact(s, ctx.org_id, contact_id))
    return Envelope(data=ContactView.model_validate(row, from_attributes=True))


@router.patch("/contacts/{contact_id}", response_model=Envelope[ContactView], responses=_ERRORS)
async def update_contact(contact_id: uuid.UUID, body: UpdateContact, ctx: Manager) -> Envelope[ContactView]:
    """Correct what the channel gave: fields left out are kept, `null` clears one; audit `contact.updated`
    names the fields, never their values."""
    changes = body.model_dump(exclude_unset=True)
    row = await ctx.session.run_sync(
        lambda s: service.update_contact(
            s, ctx.org_id, contact_id, changes, actor_user_id=ctx.principal.user_id, request_id=ctx.request_id
        )
    )
    return Envelope(data=ContactView.model_validate(row, from_attributes=True))


@router.post(
    "/contacts/{contact_id}:erase",
    response_model=Envelope[ContactView],
    responses=error_responses(Unauthorized, Forbidden, NotFound, ValidationFailed, erasure.ContactHasActiveRun),
)
async def erase_contact(contact_id: uuid.UUID, ctx: AdminWrite) -> Envelope[ContactView]:
    """Erase the customer's personal data everywhere (docs/api.md "Erasing a contact"); cannot be
    undone. `409 contact_has_active_run` while a run of theirs is active; erasing again runs every
    step again (it removes what a writer under way put back)."""
    row = await ctx.session.run_sync(
        lambda s: erasure.erase_contact(
            s, ctx.org_id, contact_id, actor_user_id=ctx.principal.user_id, request_id=ctx.request_id
        )
    )
    return Envelope(data=ContactView.model_validate(row, from_attributes=True))
