"""The FastAPI application: middleware, error envelope, probes, and one router per domain."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.api.agents.endpoints import router as agents_router
from services.api.agents.skills import router as skills_router
from services.api.analysis.endpoints import router as insights_router
from services.api.analysis.scheduler import AnalysisScheduler
from services.api.audit.endpoints import router as audit_router
from services.api.autonomy.endpoints import router as autonomy_router
from services.api.budgets.endpoints import router as budgets_router
from services.api.catalog.endpoints import router as catalog_router
from services.api.channels.endpoints import router as channels_router
from services.api.contacts.endpoints import router as contacts_router
from services.api.conversations.endpoints import router as conversations_router
from services.api.core.cors import install_cors, parse_origins
from services.api.core.database import Database
from services.api.core.errors import install_error_handlers
from services.api.core.request_id import install_request_id
from services.api.core.request_metrics import install_request_metrics
from services.api.core.text_guard import reject_nul_characters
from services.api.credentials.endpoints import router as credentials_router
from services.api.followups.endpoints import router as followups_router
from services.api.followups.scheduler import FollowupScheduler
from services.api.goals.endpoints import router as goals_router
from services.api.home.endpoints import router as home_router
from services.api.identity.endpoints import router as identity_router
from services.api.mcp.server import MCP_MOUNT, McpToolServer
from services.api.members.endpoints import router as members_router
from services.api.memory.endpoints import router as memory_router
from services.api.org_webhooks.endpoints import router as org_webhooks_router
from services.api.organization.endpoints import router as organization_router
from services.api.runs.endpoints import router as runs_router
from services.api.runs_live.endpoints import router as runs_live_router
from services.api.settings import ApiSettings
from services.api.webhooks.endpoints import router as webhooks_router
from services.api.webhooks.group_commit import WebhookGroupCommit
from switchboard.contracts import Serde
from switchboard.crypto import KeyRing
from switchboard.kafka.admin import broker_answers
from switchboard.kafka.outbox_relay import OutboxRelay, OutboxRelaySettings
from switchboard.run_tokens import RunTokenSettings


def create_app(settings: ApiSettings | None = None) -> FastAPI:
    """Build the app; every response carries ``X-Request-Id`` (the caller's, or a new one)."""
    settings = settings or ApiSettings()
    # The internal MCP tool server (runs' CRM tools), mounted so the stack needs no extra process;
    # its own run-token guard answers 401 without a valid token (docs/runner.md).
    mcp = (
        McpToolServer(database=settings.database, secret=RunTokenSettings().secret(settings.runtime))
        if settings.mcp_enabled
        else None
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.settings = settings
        app.state.keyring = KeyRing.from_settings(settings.runtime)
        app.state.serde = Serde.from_settings(settings.kafka)
        app.state.database = Database.connect(settings.database)
        # The outbox relay rides along (one active per database, by advisory lock), so a
        # single `switchboard api` publishes what it writes; turn off with API_OUTBOX_RELAY=false
        # when `switchboard outbox-relay` runs separately.
        relay: OutboxRelay | None = None
        if settings.outbox_relay:
            relay = OutboxRelay(
                OutboxRelaySettings(runtime=settings.runtime, kafka=settings.kafka, database=settings.database),
                service="api",
            )
            relay.start()
        app.state.outbox_relay = relay
        writer = WebhookGroupCommit(
            app.state.database.sessions,
            keyring=app.state.keyring,
            serde=app.state.serde,
            writers=settings.webhook_writers,
            max_batch=settings.webhook_batch_max,
            on_commit=relay.wake if relay is not None else None,
        )
        writer.start()
        app.state.webhook_writer = writer
        # Due follow-ups become followUp wakes through the outbox (docs/memory.md); every replica may run it.
        scheduler: FollowupScheduler | None = None
        if settings.followup_scheduler:
            scheduler = FollowupScheduler(app.state.database.sessions, app.state.serde, poll_s=settings.followup_poll_s)
            scheduler.start()
        # The daily analysis fan-out, once per org and local day (docs/analysis.md); every replica may run it.
        analysis: AnalysisScheduler | None = None
        if settings.analysis_scheduler:
            analysis = AnalysisScheduler(
                app.state.database.sessions,
                app.state.serde,
                local_hour=settings.analysis_local_hour,
                poll_s=settings.analysis_poll_s,
            )
            analysis.start()
        try:
            async with mcp.lifespan() if mcp is not None else contextlib.nullcontext():
                yield
        finally:
            if analysis is not None:
                await analysis.stop()
            if scheduler is not None:
                await scheduler.stop()
            await writer.stop()
            if relay is not None:
                await relay.stop()
            await app.state.database.dispose()

    app = FastAPI(
        title="Switchboard API",
        version="0.1.0",
        description="Configure agents, credentials and channels; read runs, the audit log and the Home digest.",
        lifespan=lifespan,
        dependencies=[Depends(reject_nul_characters)],
    )
    install_error_handlers(app)
    install_cors(app, parse_origins(settings.cors_origins))
    install_request_metrics(app)
    install_request_id(app)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    async def readyz(request: Request) -> JSONResponse:
        checks = {"database": False, "kafka": False, "webhook_writer": request.app.state.webhook_writer.running}
        checks["database"] = await request.app.state.database.answers()
        checks["kafka"] = await broker_answers(settings.kafka, timeout_s=0.5)  # inside the probe's 2 s
        # Kafka is reported, never required: REST calls and webhooks only write PostgreSQL (the
        # outbox holds the records until the broker is back), so a broker outage must not take
        # every API pod out of its Service and refuse WhatsApp's deliveries (docs/deploy.md).
        ready = checks["database"] and checks["webhook_writer"]
        return JSONResponse(
            {"status": "ready" if ready else "not_ready", "checks": checks}, status_code=200 if ready else 503
        )

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    # The webhook first: routes are matched in order, and it is the one hot path (every customer message).
    for router in (
        webhooks_router,
        identity_router,
        members_router,
        catalog_router,
        credentials_router,
        agents_router,
        skills_router,
        runs_router,
        channels_router,
        audit_router,
        runs_live_router,
        home_router,
        budgets_router,
        conversations_router,
        contacts_router,
        memory_router,
        followups_router,
        goals_router,
        org_webhooks_router,
        organization_router,
        autonomy_router,
        insights_router,
    ):
        app.include_router(router)
    if mcp is not None:
        app.mount(MCP_MOUNT, mcp.app)
    # Set when the process starts stopping (``__main__``), before uvicorn's graceful wait: requests
    # that wait long (a dry run's answer, a run's live events) answer with what they have instead
    # of being cut at API_GRACEFUL_TIMEOUT_S (docs/deploy.md, the api's grace period).
    app.state.draining = asyncio.Event()
    return app
