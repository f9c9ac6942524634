"""``/api/v1/providers`` and ``/api/v1/models``: the model catalog, readable by every role [004 §4.1]."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from services.api.catalog import service
from services.api.catalog.schemas import ModelView, ProviderView
from services.api.core.auth import Viewer
from services.api.core.errors import Unauthorized, ValidationFailed, error_responses
from services.api.core.responses import Envelope
from switchboard.db.enums import LlmProvider

router = APIRouter(prefix="/api/v1", tags=["catalog"])


@router.get("/providers", response_model=Envelope[list[ProviderView]], responses=error_responses(Unauthorized))
async def list_providers(ctx: Viewer) -> Envelope[list[ProviderView]]:
    """Model providers (Anthropic, OpenAI, Google, and the built-in demo) with how many models each offers."""
    return Envelope(data=await ctx.session.run_sync(service.providers))


@router.get(
    "/models",
    response_model=Envelope[list[ModelView]],
    responses=error_responses(Unauthorized, ValidationFailed),
)
async def list_models(
    ctx: Viewer,
    provider: Annotated[LlmProvider | None, Query(description="Only this provider's models.")] = None,
    include_deprecated: Annotated[bool, Query(description="Also list models no longer offered.")] = False,
) -> Envelope[list[ModelView]]:
    """The catalog with prices per million tokens, context window and each provider's default model."""
    return Envelope(
        data=await ctx.session.run_sync(
            lambda s: service.models(s, provider=provider, include_deprecated=include_deprecated)
        )
    )


@router.get(
    "/providers/{provider}/models",
    response_model=Envelope[list[ModelView]],
    responses=error_responses(Unauthorized, ValidationFailed),
)
async def list_provider_models(
    provider: LlmProvider,
    ctx: Viewer,
    include_deprecated: Annotated[bool, Query(description="Also list models no longer offered.")] = False,
) -> Envelope[list[ModelView]]:
    """One provider's models (the seed's path for the same list as ``/models?provider=``)."""
    return Envelope(
        data=await ctx.session.run_sync(
            lambda s: service.models(s, provider=provider, include_deprecated=include_deprecated)
        )
    )
