"""``X-Request-Id`` on every response: the caller's (if sane) or a new uuid.

A plain ASGI middleware rather than ``@app.middleware("http")``: Starlette's
``BaseHTTPMiddleware`` wraps every request in extra tasks and streams, which
measurably cut the webhook's throughput (docs/benchmarks.md).
"""

from __future__ import annotations

import uuid

from starlette.applications import Starlette
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.api.core.outermost import wrap_outermost

REQUEST_ID_HEADER = "X-Request-Id"
_HEADER_BYTES = REQUEST_ID_HEADER.lower().encode()


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = next((v for k, v in scope["headers"] if k == _HEADER_BYTES), b"").decode("latin-1")
        rid = incoming if 0 < len(incoming) <= 128 and incoming.isprintable() else str(uuid.uuid4())
        scope.setdefault("state", {})["request_id"] = rid

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k != _HEADER_BYTES]
                message["headers"] = [*headers, (_HEADER_BYTES, rid.encode("latin-1"))]
            await send(message)

        await self.app(scope, receive, send_with_id)


def install_request_id(app: Starlette) -> None:
    """Make :class:`RequestIdMiddleware` the outermost layer of ``app``: the 500 answer of the
    catch-all handler is the one response whose id an operator needs to find the log line."""
    wrap_outermost(app, RequestIdMiddleware)
