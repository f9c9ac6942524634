"""The internal MCP tool server [SPEC §4, 004 Spec 11]: the CRM tools over streamable HTTP.

Built with the official ``mcp`` SDK (``MCPServer``), stateless streamable HTTP
with JSON responses: every request stands alone, so any API replica answers
any run and nothing is kept between calls.

**Authentication.** Each request carries the run's token (``Authorization:
Bearer sbrt_…``, minted by the runner, ``switchboard.run_tokens``). An ASGI
guard in front of the SDK refuses a missing, forged or expired token with 401
before the SDK sees the request; each tool verifies it again and acts only
for the token's org, run and conversation, and only if the token grants that
tool (the version's tools, the handoff tool, follow-ups only with callbacks on).
DNS-rebinding protection (a browser-facing concern) is off: callers are
services presenting a bearer token.

**Running it.** Mounted in the API process by default (``API_MCP_ENABLED``):
``services/api/app.py`` mounts ``McpToolServer.app`` at :data:`MCP_MOUNT` and
enters ``McpToolServer.lifespan()`` in the app's lifespan, so the URL is
``http://<api>/internal/mcp``. Standalone, for operators who scale it apart:
``switchboard mcp`` / ``python -m services.api.mcp`` (``MCP_PORT``, default 8100)
serves the same path, so ``RUNNER_MCP_URL`` only changes host and port.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Mount
from starlette.types import ASGIApp, Receive, Scope, Send

from services.api.mcp.analysis_tools import AnalysisTools
from services.api.mcp.memory_tools import FactScopeName, save_fact
from services.api.mcp.tools import CrmTools, ToolFailure
from switchboard.db.session import create_async_engine, create_async_sessionmaker
from switchboard.observability.logging import get_logger
from switchboard.run_tokens import RunTokenClaims, RunTokenError, verify_run_token
from switchboard.settings import DatabaseSettings
from switchboard.tool_catalog import (
    ANALYTICS_AREA_SUMMARY,
    CANCEL_FOLLOWUP,
    CONVERSATION_HISTORY,
    INSIGHTS_PUBLISH,
    LIST_FOLLOWUPS,
    MEMORY_SAVE_FACT,
    REQUEST_HUMAN_HANDOFF,
    SCHEDULE_FOLLOWUP,
    SEARCH_CONTACTS,
    SEND_WHATSAPP_MESSAGE,
)

log = get_logger(__name__)

UrgencyLevel = Literal["low", "normal", "high", "urgent"]
# Where the server is mounted, in the API and standalone alike: /internal/mcp. Never route
# /internal from outside the cluster (docs/deploy.md).
MCP_MOUNT = "/internal"


def _bearer(headers: Any) -> str | None:
    if headers is None:
        return None
    value = headers.get("authorization") or headers.get("Authorization")
    if not value or not value.lower().startswith("bearer "):
        return None
    return str(value[7:].strip())


class RunTokenGuard:
    """ASGI middleware: HTTP requests need a valid run token; lifespan passes through."""

    def __init__(self, app: ASGIApp, secret: bytes) -> None:
        self._app = app
        self._secret = secret

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        token = _bearer(headers)
        try:
            if token is None:
                raise RunTokenError("missing", "no run token")
            verify_run_token(self._secret, token)
        except RunTokenError as exc:
            response = JSONResponse(
                {"error": {"code": f"run_token_{exc.code}", "message": "a valid run token is required"}},
                status_code=401,
            )
            await response(scope, receive, send)
            return
        await self._app(scope, receive, send)


def build_server(tools: CrmTools, secret: bytes) -> MCPServer:
    """The MCP server with every CRM tool (descriptions and schemas come from here)."""
    server: MCPServer = MCPServer(
        "switchboard-crm",
        instructions="CRM tools of one Switchboard organization, scoped to the calling run.",
    )

    def claims_for(ctx: Context, tool_name: str) -> RunTokenClaims:
        token = _bearer(ctx.headers)
        if token is None:
            raise ToolError("no run token")
        try:
            claims = verify_run_token(secret, token)
        except RunTokenError as exc:
            raise ToolError(f"run token refused ({exc.code})") from None
        if not claims.allows(tool_name):
            raise ToolError(f"{tool_name} is not granted to this run")
        return claims

    async def call(ctx: Context, tool_name: str, action: Callable[[RunTokenClaims], Awaitable[dict[str, Any]]]) -> str:
        claims = claims_for(ctx, tool_name)
        try:
            result = await action(claims)
        except ToolFailure as exc:
            raise ToolError(str(exc)) from None
        log.info("tool called", extra={"tool_name": tool_name, "run_id": str(claims.run_id)})
        return json.dumps(result, ensure_ascii=False)

    @server.tool(name=SEARCH_CONTACTS, structured_output=False)
    async def search_contacts(query: str, ctx: Context, limit: int = 5) -> str:
        """Search the organization's contacts by name, phone number, e-mail or chat id."""
        return await call(ctx, SEARCH_CONTACTS, lambda c: tools.search_contacts(c, query=query, limit=limit))

    @server.tool(name=CONVERSATION_HISTORY, structured_output=False)
    async def conversation_history(ctx: Context, limit: int = 20, before: str | None = None) -> str:
        """Messages of the current conversation, oldest first. Pass `before` (the `next_before` of a
        previous answer) to page back to older messages."""
        return await call(
            ctx, CONVERSATION_HISTORY, lambda c: tools.conversation_history(c, limit=limit, before=before)
        )

    @server.tool(name=SEND_WHATSAPP_MESSAGE, structured_output=False)
    async def send_whatsapp_message(text: str, ctx: Context) -> str:
        """Send an extra WhatsApp message to the customer of this conversation now (your final answer
        is sent anyway; use this only for a separate message)."""
        return await call(ctx, SEND_WHATSAPP_MESSAGE, lambda c: tools.send_whatsapp_message(c, text=text))

    @server.tool(name=REQUEST_HUMAN_HANDOFF, structured_output=False)
    async def request_human_handoff(reason: str, ctx: Context, urgency: UrgencyLevel = "normal") -> str:
        """Hand this conversation to a person of the team. Use when the customer asks for a person, is
        upset, or you cannot help. Ends your run."""
        claims_for(ctx, REQUEST_HUMAN_HANDOFF)
        if not reason.strip():
            raise ToolError("reason must not be empty")
        return json.dumps({"status": "handoff_requested", "urgency": urgency})

    @server.tool(name=SCHEDULE_FOLLOWUP, structured_output=False)
    async def schedule_followup(reason: str, due_in_minutes: int, ctx: Context) -> str:
        """Schedule a follow-up: this conversation's agent is woken again after `due_in_minutes`
        with the reason, e.g. to call the customer back as promised."""
        return await call(
            ctx,
            SCHEDULE_FOLLOWUP,
            lambda c: tools.schedule_followup(c, reason=reason, due_in_minutes=due_in_minutes),
        )

    @server.tool(name=LIST_FOLLOWUPS, structured_output=False)
    async def list_followups(ctx: Context) -> str:
        """Follow-ups scheduled for this conversation and not yet due."""
        return await call(ctx, LIST_FOLLOWUPS, tools.list_followups)

    @server.tool(name=CANCEL_FOLLOWUP, structured_output=False)
    async def cancel_followup(followup_id: str, ctx: Context) -> str:
        """Cancel a scheduled follow-up of this conversation (ids from crm_list_followups)."""
        return await call(ctx, CANCEL_FOLLOWUP, lambda c: tools.cancel_followup(c, followup_id=followup_id))

    @server.tool(name=MEMORY_SAVE_FACT, structured_output=False)
    async def memory_save_fact(fact: str, ctx: Context, scope: FactScopeName = "contact") -> str:
        """Remember one short, durable fact for future conversations: about this customer (scope
        `contact`, e.g. a preference) or about the business (scope `org`). Not for chit-chat."""
        return await call(ctx, MEMORY_SAVE_FACT, lambda c: save_fact(tools.sessions, c, fact=fact, scope=scope))

    analysis = AnalysisTools(tools.sessions)

    @server.tool(name=ANALYTICS_AREA_SUMMARY, structured_output=False)
    async def analytics_area_summary(area: str, ctx: Context, days: int = 7) -> str:
        """Aggregated activity of one business area over the last `days` days (1-90): run, message and
        conversation counts, spend, decisions by action type and status, insights by status. Counts only."""
        return await call(ctx, ANALYTICS_AREA_SUMMARY, lambda c: analysis.area_summary(c, area=area, days=days))

    @server.tool(name=INSIGHTS_PUBLISH, structured_output=False)
    async def insights_publish(items: list[dict[str, Any]], ctx: Context) -> str:
        """Publish your findings to the owner's Home. Each item: `key` (a stable slug naming the finding:
        the same finding gets the same key every day), `area`, `title`, `body`, `suggested_actions`
        (list of {action_type, label, arguments})."""
        return await call(ctx, INSIGHTS_PUBLISH, lambda c: analysis.publish(c, items=items))

    return server


class McpToolServer:
    """The server as an ASGI app, with its database pool."""

    def __init__(self, *, database: DatabaseSettings, secret: bytes, path: str = "/mcp") -> None:
        self._engine: AsyncEngine = create_async_engine(
            database.url.get_secret_value(),
            pool_size=database.pool_size,
            prepared_statements=database.prepared_statements,
        )
        self.mcp = build_server(CrmTools(create_async_sessionmaker(self._engine)), secret)
        inner = self.mcp.streamable_http_app(
            streamable_http_path=path,
            stateless_http=True,
            json_response=True,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self.app: ASGIApp = RunTokenGuard(inner, secret)

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Runs the SDK's session manager (requests need its task group), then closes the pool.

        The manager's anyio task group lives in a task of its own, because a task group must be
        left by the task that entered it, while an app's lifespan may be entered and left by
        different tasks (uvicorn does not, test fixtures and embedding apps may)."""
        started, stop = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            async with self.mcp.session_manager.run():
                started.set()
                await stop.wait()

        holder = asyncio.create_task(hold(), name="mcp-session-manager")
        waiter = asyncio.create_task(started.wait())
        try:
            await asyncio.wait({holder, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if holder.done():
                holder.result()  # it failed to start: raise its error here
            yield
        finally:
            waiter.cancel()
            stop.set()
            await asyncio.gather(holder, return_exceptions=True)
            await self.dispose()

    def standalone_app(self) -> Starlette:
        """The server alone, at the same path as in the API (``/internal/mcp``), with its lifespan."""
        return Starlette(routes=[Mount(MCP_MOUNT, app=self.app)], lifespan=lambda _: self.lifespan())

    async def dispose(self) -> None:
        await self._engine.dispose()
