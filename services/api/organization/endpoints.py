"""``/api/v1/organization``: the org's name, time zone and run rate limit [SPEC §5].

Everyone in the org may read them; changing them is an admin write (MFA), audited.
"""

from __future__ import annotations

from fastapi import APIRouter

from services.api.core.auth import AdminWrite, Viewer
from services.api.core.errors import Forbidden, MfaRequired, NotFound, Unauthorized, ValidationFailed, error_responses
from services.api.core.responses import Envelope
from services.api.organization import service
from services.api.organization.schemas import OrganizationPatch, OrganizationView

router = APIRouter(prefix="/api/v1", tags=["organization"])


@router.get(
    "/organization", response_model=Envelope[OrganizationView], responses=error_responses(Unauthorized, Forbidden)
)
async def get_organization(ctx: Viewer) -> Envelope[OrganizationView]:
    return Envelope(data=await ctx.session.run_sync(lambda s: service.get(s, ctx.org_id)))


@router.patch(
    "/organization",
    response_model=Envelope[OrganizationView],
    responses=error_responses(Unauthorized, Forbidden, MfaRequired, NotFound, ValidationFailed),
)
async def patch_organization(body: OrganizationPatch, ctx: AdminWrite) -> Envelope[OrganizationView]:
    """Change the name, the time zone (the Home's day, the analyses' local hour, business hours
    written without a zone from now on) or the runs started per minute; applies from the next use."""
    view = await ctx.session.run_sync(
        lambda s: service.update(s, ctx.org_id, body, ctx.principal.user_id, ctx.request_id)
    )
    return Envelope(data=view)
