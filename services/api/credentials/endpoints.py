"""``/api/v1/credentials``: bring-your-own provider keys [004 §4.2, §7].

Managers may read the safe view; adding, revalidating and deleting a key is an
admin write (MFA-verified session). The key is sealed before the row is
written and never returned. Validation against the provider runs as a
background task after the response (and after the request's commit).
"""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Query, Request, status
from sqlalchemy.orm import Session

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
from services.api.credentials import service
from services.api.credentials.background import ValidationDeps, validate_in_background
from services.api.credentials.schemas import CreateCredential, CredentialProvider, CredentialView, UpdateCredential
from services.api.settings import ApiSettings
from switchboard.credentials import ProviderSettings
from switchboard.crypto import KeyRing

router = APIRouter(prefix="/api/v1", tags=["credentials"])


def _keyring(request: Request) -> KeyRing:
    keyring: KeyRing = request.app.state.keyring
    return keyring


def _validation_deps(request: Request) -> ValidationDeps:
    state = request.app.state
    settings: ApiSettings = state.settings
    providers: ProviderSettings = settings.providers
    egress = settings.egress.policy(
        trusted_urls=tuple(providers.base_url(provider) for provider in ("anthropic", "openai", "google"))
    )
    return ValidationDeps(database=state.database, keyring=state.keyring, providers=providers, egress=egress)


@router.post(
    "/credentials",
    response_model=Envelope[CredentialView],
    status_code=status.HTTP_201_CREATED,
    responses=error_responses(Unauthorized, Forbidden, MfaRequired, Conflict, ValidationFailed),
)
async def create_credential(
    body: CreateCredential, ctx: AdminWrite, request: Request, background: BackgroundTasks
) -> Envelope[CredentialView]:
    """Store a provider key, encrypted on receipt; returns the safe view (``validation_status: pending``).

    The key is then checked against the provider's models endpoint in the background;
    read the credential again for ``validated_at`` or ``validation_error``.
    """
    keyring = _keyring(request)
    p = ctx.principal
    created = await ctx.session.run_sync(
        lambda s: service.view(
            service.create_credential(
                s,
                keyring,
                org_id=p.org_id,
                actor_user_id=p.user_id,
                provider=body.provider,
                label=body.label,
                api_key=body.api_key.get_secret_value(),
                base_url=body.base_url,
                is_default=body.is_default,
                request_id=ctx.request_id,
            )
        )
    )
    background.add_task(validate_in_background, _validation_deps(request), p.org_id, created.id)
    return Envelope(data=created)


@router.get(
    "/credentials",
    response_model=Envelope[list[CredentialView]],
    responses=error_responses(Unauthorized, Forbidden, ValidationFailed),
)
async def list_credentials(
    ctx: Manager,
    provider: Annotated[CredentialProvider | None, Query(description="Only this provider's keys.")] = None,
) -> Envelope[list[CredentialView]]:
    """The organization's keys (safe view, oldest first); deleted keys are not listed."""
    return Envelope(
        data=await ctx.session.run_sync(lambda s: service.list_credentials(s, org_id=ctx.org_id, provider=provider))
    )


@router.get(
    "/credentials/{credential_id}",
    response_model=Envelope[CredentialView],
    responses=error_responses(Unauthorized, Forbidden, NotFound, ValidationFailed),
)
async def get_credential(credential_id: uuid.UUID, ctx: Manager) -> Envelope[CredentialView]:
    return Envelope(
        data=await ctx.session.run_sync(
            lambda s: service.view(service.get_credential(s, org_id=ctx.org_id, credential_id=credential_id))
        )
    )


@router.post(
    "/credentials/{credential_id}:revalidate",
    response_model=Envelope[CredentialView],
    status_code=status.HTTP_202_ACCEPTED,
    responses=error_responses(Unauthorized, Forbidden, NotFound, ValidationFailed),
)
async def revalidate_credential(
    credential_id: uuid.UUID, ctx: Manager, request: Request, background: BackgroundTasks
) -> Envelope[CredentialView]:
    """Check the key against its provider again (in the background); answers with ``pending``.

    ``manager`` [004 §7]: it changes no secret and reveals nothing, and the person who sees runs
    failing on a key should be able to re-check it once the provider account is fixed."""
    p = ctx.principal
    pending = await ctx.session.run_sync(
        lambda s: service.view(
            service.request_revalidation(
                s, org_id=p.org_id, credential_id=credential_id, actor_user_id=p.user_id, request_id=ctx.request_id
            )
        )
    )
    background.add_task(validate_in_background, _validation_deps(request), p.org_id, credential_id)
    return Envelope(data=pending)


@router.patch(
    "/credentials/{credential_id}",
    response_model=Envelope[CredentialView],
    responses=error_responses(Unauthorized, Forbidden, MfaRequired, NotFound, Conflict, ValidationFailed),
)
async def update_credential(
    credential_id: uuid.UUID, body: UpdateCredential, ctx: AdminWrite, request: Request, background: BackgroundTasks
) -> Envelope[CredentialView]:
    """Rename it, make it the provider's default (or stop), or replace its key in place.

    A new ``api_key`` is used by every version naming this credential from its next run, and is
    checked in the background (``validation_status: pending`` until then): rotating a leaked key
    is this one call. Only the properties sent change."""
    keyring = _keyring(request)
    p = ctx.principal
    api_key = body.api_key.get_secret_value() if body.api_key is not None else None

    def update(s: Session) -> tuple[CredentialView, bool]:
        row, replaced = service.update_credential(
            s,
            keyring,
            org_id=p.org_id,
            credential_id=credential_id,
            actor_user_id=p.user_id,
            label=body.label,
            api_key=api_key,
            is_default=body.is_default,
            request_id=ctx.request_id,
        )
        return service.view(row), replaced

    updated, key_replaced = await ctx.session.run_sync(update)
    if key_replaced:
        background.add_task(validate_in_background, _validation_deps(request), p.org_id, credential_id)
    return Envelope(data=updated)


@router.delete(
    "/credentials/{credential_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=error_responses(Unauthorized, Forbidden, MfaRequired, NotFound, Conflict, ValidationFailed),
)
async def delete_credential(credential_id: uuid.UUID, ctx: AdminWrite) -> None:
    """Delete a key: its ciphertext is erased at once; 409 ``conflict`` while a published version uses it."""
    p = ctx.principal
    await ctx.session.run_sync(
        lambda s: service.delete_credential(
            s, org_id=p.org_id, credential_id=credential_id, actor_user_id=p.user_id, request_id=ctx.request_id
        )
    )
