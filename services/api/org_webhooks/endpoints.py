"""``/api/v1/org-webhook``: the org's outgoing webhook (handoffs and budget incidents are POSTed there)."""

from __future__ import annotations

from fastapi import APIRouter, Request, status

from services.api.core.auth import AdminWrite, Manager
from services.api.core.errors import Forbidden, MfaRequired, NotFound, Unauthorized, ValidationFailed, error_responses
from services.api.core.responses import Envelope
from services.api.org_webhooks import service
from services.api.org_webhooks.schemas import OrgWebhookIssued, OrgWebhookView, SetOrgWebhook
from switchboard.crypto import KeyRing
from switchboard.db.models.notifications import OrgWebhook

router = APIRouter(prefix="/api/v1", tags=["org webhook"])


def _view(row: OrgWebhook) -> OrgWebhookView:
    return OrgWebhookView(id=row.id, url=row.url, created_at=row.created_at, updated_at=row.updated_at)


@router.get(
    "/org-webhook",
    response_model=Envelope[OrgWebhookView],
    responses=error_responses(Unauthorized, Forbidden, NotFound),
)
async def get_org_webhook(ctx: Manager) -> Envelope[OrgWebhookView]:
    row = await ctx.session.run_sync(lambda s: service.get_webhook(s, org_id=ctx.org_id))
    return Envelope(data=_view(row))


@router.put(
    "/org-webhook",
    response_model=Envelope[OrgWebhookIssued],
    responses=error_responses(Unauthorized, Forbidden, MfaRequired, ValidationFailed),
)
async def set_org_webhook(body: SetOrgWebhook, ctx: AdminWrite, request: Request) -> Envelope[OrgWebhookIssued]:
    """Create or replace the webhook; the response holds a new signing secret, shown this once."""
    keyring: KeyRing = request.app.state.keyring
    issued = await ctx.session.run_sync(
        lambda s: service.set_webhook(
            s,
            keyring,
            org_id=ctx.org_id,
            url=body.url,
            actor_user_id=ctx.principal.user_id,
            request_id=ctx.request_id,
        )
    )
    return Envelope(data=OrgWebhookIssued(**_view(issued.row).model_dump(), secret=issued.secret))


@router.delete(
    "/org-webhook",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=error_responses(Unauthorized, Forbidden, MfaRequired, NotFound),
)
async def delete_org_webhook(ctx: AdminWrite) -> None:
    await ctx.session.run_sync(
        lambda s: service.delete_webhook(
            s, org_id=ctx.org_id, actor_user_id=ctx.principal.user_id, request_id=ctx.request_id
        )
    )
