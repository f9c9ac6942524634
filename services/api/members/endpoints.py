"""``/api/v1/members``: who belongs to the org and with which role (viewer < manager < admin).

Managers see the list; adding, re-roling and removing people is an admin write (MFA), audited.
"""

from __future__ import annotations

import uuid

from fastapi import APIRouter, status

from services.api.core.auth import AdminWrite, Manager
from services.api.core.errors import (
    Conflict,
    Forbidden,
    MfaRequired,
    NotFound,
    Unauthorized,
    ValidationFailed,
    error_responses,
)
from services.api.core.responses import Envelope
from services.api.members import service
from services.api.members.schemas import AddMember, ChangeRole, MemberView

router = APIRouter(prefix="/api/v1", tags=["members"])

_WRITE_ERRORS = error_responses(Unauthorized, Forbidden, MfaRequired, NotFound, Conflict, ValidationFailed)


@router.get("/members", response_model=Envelope[list[MemberView]], responses=error_responses(Unauthorized, Forbidden))
async def list_members(ctx: Manager) -> Envelope[list[MemberView]]:
    """Everyone in the org, oldest membership first."""
    return Envelope(data=await ctx.session.run_sync(lambda s: service.list_members(s, ctx.org_id)))


@router.post(
    "/members", response_model=Envelope[MemberView], status_code=status.HTTP_201_CREATED, responses=_WRITE_ERRORS
)
async def add_member(body: AddMember, ctx: AdminWrite) -> Envelope[MemberView]:
    """Add a person with a role; ``409 member_exists`` if they already belong to the org."""
    view = await ctx.session.run_sync(
        lambda s: service.add_member(s, ctx.org_id, body, ctx.principal.user_id, ctx.request_id)
    )
    return Envelope(data=view)


@router.patch("/members/{user_id}", response_model=Envelope[MemberView], responses=_WRITE_ERRORS)
async def change_member_role(user_id: uuid.UUID, body: ChangeRole, ctx: AdminWrite) -> Envelope[MemberView]:
    """Change a member's role; a demotion revokes their tokens above the new role (``409 last_admin``
    for the org's only admin)."""
    view = await ctx.session.run_sync(
        lambda s: service.change_role(s, ctx.org_id, user_id, body.role, ctx.principal.user_id, ctx.request_id)
    )
    return Envelope(data=view)


@router.delete("/members/{user_id}", status_code=status.HTTP_204_NO_CONTENT, responses=_WRITE_ERRORS)
async def remove_member(user_id: uuid.UUID, ctx: AdminWrite) -> None:
    """Remove a member; every token of theirs in this org stops working at once."""
    await ctx.session.run_sync(
        lambda s: service.remove_member(s, ctx.org_id, user_id, ctx.principal.user_id, ctx.request_id)
    )
