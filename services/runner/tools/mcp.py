"""The runner as an MCP client of the internal tool server (official ``mcp`` SDK, streamable HTTP).

Each run talks to the server with its own short-lived token (``switchboard.run_tokens``)
in the ``Authorization`` header; the server scopes every tool to the token's org,
run and conversation. The tool list (names, descriptions, JSON schemas) comes
from the server and is cached per process for a minute, so a run that never
calls a tool never opens a connection. A run that does opens one MCP session,
lazily, on its first call, and closes it when the run ends.

Errors: a tool that fails returns an error result (``isError``) that goes back
to the model; a server that cannot be reached raises
:class:`ToolServerUnavailable`, which ends the run in handoff [004 R6].

Transport errors are retried where that is safe, so one dropped connection (an API pod
rolling, a gateway's 502) does not hand a customer to humans: connecting and listing the
tools are retried (nothing has happened yet), and so is a call of a *read* tool. A write
tool's call is not: the request may have reached the server and acted (a message sent),
and doing it twice is worse than a handoff. ``TRANSPORT_ATTEMPTS`` tries in all, with a
short pause between them.
"""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import AsyncExitStack
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from services.runner.providers.base import ToolCallRequest, ToolOutcome, ToolSpec
from services.runner.tools.base import ToolServerUnavailable
from switchboard.observability.logging import get_logger
from switchboard.tool_catalog import TOOL_KINDS, ToolKind

log = get_logger(__name__)

MAX_RESULT_CHARS = 20_000
TRANSPORT_ATTEMPTS = 3
RETRY_PAUSE_S = 0.2


def _connect(url: str, token: str, timeout_s: float) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s)
    return Client(streamable_http_client(url, http_client=http), read_timeout_seconds=timeout_s)


def _result_text(result: Any) -> str:
    texts = [getattr(block, "text", None) for block in (result.content or [])]
    text = "\n".join(t for t in texts if t)
    if not text and getattr(result, "structured_content", None) is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False, default=str)
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + "\n[truncated]"
    return text


class ToolCatalog:
    """The server's tool list, cached per process (tools change only with a deploy)."""

    def __init__(self, *, ttl_s: float = 60.0) -> None:
        self._ttl_s = ttl_s
        self._cached: dict[str, tuple[float, tuple[ToolSpec, ...]]] = {}
        self._lock = asyncio.Lock()

    async def specs(self, url: str, token: str, timeout_s: float) -> tuple[ToolSpec, ...]:
        hit = self._cached.get(url)
        if hit is not None and time.monotonic() - hit[0] < self._ttl_s:
            return hit[1]
        async with self._lock:
            hit = self._cached.get(url)
            if hit is not None and time.monotonic() - hit[0] < self._ttl_s:
                return hit[1]
            listing = await self._list(url, token, timeout_s)
            specs = tuple(
                ToolSpec(name=t.name, description=t.description or "", input_schema=dict(t.input_schema or {}))
                for t in listing.tools
            )
            self._cached[url] = (time.monotonic(), specs)
            return specs

    @staticmethod
    async def _list(url: str, token: str, timeout_s: float) -> Any:
        for attempt in range(1, TRANSPORT_ATTEMPTS + 1):
            try:
                async with asyncio.timeout(timeout_s), _connect(url, token, timeout_s) as client:
                    return await client.list_tools()
            except Exception as exc:
                log.warning("tool server unreachable", extra={"error": type(exc).__name__, "attempt": attempt})
                if attempt == TRANSPORT_ATTEMPTS:
                    raise ToolServerUnavailable("the tool server did not answer the tool list") from None
                await asyncio.sleep(RETRY_PAUSE_S * attempt)
        raise AssertionError("unreachable")

    def invalidate(self) -> None:
        self._cached.clear()


class McpToolBox:
    """The tools of one run, from the internal MCP server."""

    def __init__(
        self, *, url: str, token: str, granted: tuple[str, ...], catalog: ToolCatalog, timeout_s: float
    ) -> None:
        self._url = url
        self._token = token
        self._granted = granted
        self._catalog = catalog
        self._timeout_s = timeout_s
        self._stack: AsyncExitStack | None = None
        self._client: Client | None = None

    async def specs(self) -> tuple[ToolSpec, ...]:
        available = {s.name: s for s in await self._catalog.specs(self._url, self._token, self._timeout_s)}
        return tuple(available[name] for name in self._granted if name in available)

    async def _session(self) -> Client:
        if self._client is not None:
            return self._client
        for attempt in range(1, TRANSPORT_ATTEMPTS + 1):
            stack = AsyncExitStack()
            try:
                async with asyncio.timeout(self._timeout_s):
                    self._client = await stack.enter_async_context(_connect(self._url, self._token, self._timeout_s))
            except Exception as exc:
                await self._close_stack(stack)
                log.warning("tool server unreachable", extra={"error": type(exc).__name__, "attempt": attempt})
                if attempt == TRANSPORT_ATTEMPTS:
                    raise ToolServerUnavailable("the tool server cannot be reached") from None
                await asyncio.sleep(RETRY_PAUSE_S * attempt)
                continue
            self._stack = stack
            return self._client
        raise AssertionError("unreachable")

    async def call(self, call: ToolCallRequest, *, timeout_s: float) -> ToolOutcome:
        # Only a read can be asked again without the risk of acting twice (module docstring).
        attempts = TRANSPORT_ATTEMPTS if TOOL_KINDS.get(call.name) is ToolKind.READ else 1
        for attempt in range(1, attempts + 1):
            client = await self._session()
            try:
                async with asyncio.timeout(timeout_s):
                    result = await client.call_tool(call.name, dict(call.arguments), read_timeout_seconds=timeout_s)
            except TimeoutError:
                return ToolOutcome(call.id, call.name, f"tool {call.name} timed out after {timeout_s:.0f}s", True)
            except Exception as exc:
                log.warning(
                    "tool call failed in transport",
                    extra={"tool_name": call.name, "error": type(exc).__name__, "attempt": attempt},
                )
                await self.aclose()
                if attempt == attempts:
                    raise ToolServerUnavailable("the tool server failed during a call") from None
                await asyncio.sleep(RETRY_PAUSE_S * attempt)
                continue
            return ToolOutcome(call.id, call.name, _result_text(result), bool(result.is_error))
        raise AssertionError("unreachable")

    @staticmethod
    async def _close_stack(stack: AsyncExitStack) -> None:
        try:
            await stack.aclose()
        except Exception:  # closing a broken session must not mask the run's own outcome
            log.debug("tool session close failed", exc_info=True)

    async def aclose(self) -> None:
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await self._close_stack(stack)
