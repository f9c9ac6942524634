"""Per-route request counts and latencies for Prometheus (docs/api.md "Metrics").

``switchboard_api_requests_total{method, route, status}`` and
``switchboard_api_request_duration_seconds{method, route}``: ``route`` is the matched route's
template (``/api/v1/agents/{agent_id}``), never the raw path — ids in a label would make a
series per resource — and ``unmatched`` for a path no route knows (probes of scanners among
them), ``<mount>/*`` for a mounted app that answered before its routing. The duration runs
from the request's arrival to the last byte of its answer, so a stream (the live run feed)
counts for as long as it stays open.

A plain ASGI layer installed outside Starlette's error middleware (``outermost.py``), so the
catch-all 500 is counted as what the caller received. Label children are cached: a
``labels()`` lookup per request would be a measurable share of the webhook's budget.
"""

from __future__ import annotations

import time
from typing import Final

from prometheus_client import Counter, Histogram
from starlette.applications import Starlette
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.api.core.outermost import wrap_outermost

UNMATCHED: Final = "unmatched"
# Any other method (a client may send anything) is counted as OTHER: one series, not one per word.
METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
OTHER: Final = "OTHER"

REQUESTS = Counter("switchboard_api_requests_total", "HTTP requests answered", ["method", "route", "status"])
DURATION = Histogram(
    "switchboard_api_request_duration_seconds",
    "Time from a request's arrival to the last byte of its answer",
    ["method", "route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)


def route_template(scope: Scope, entry_root_path: str = "") -> str:
    """The template of the route that answered, or ``unmatched``.

    Inside a mounted app (the MCP server at ``/internal``) the route's path is the app's own
    (``/mcp``): the mount's prefix, what ``root_path`` grew by, goes in front. A mounted app
    that answered before its routing (the run-token guard's 401) is ``<prefix>/*``."""
    root_path = str(scope.get("root_path", ""))
    mounted = root_path[len(entry_root_path) :] if root_path.startswith(entry_root_path) else ""
    path = getattr(scope.get("route"), "path", None)
    if isinstance(path, str) and path:
        return mounted + path
    return f"{mounted}/*" if mounted else UNMATCHED


class RequestMetricsMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._counters: dict[tuple[str, str, int], Counter] = {}
        self._histograms: dict[tuple[str, str], Histogram] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        entry_root_path = str(scope.get("root_path", ""))
        status = 500  # what the server answers when the app raises before starting a response

        async def send_and_watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_watch)
        finally:
            method = scope["method"] if scope["method"] in METHODS else OTHER
            self._observe(method, route_template(scope, entry_root_path), status, time.perf_counter() - started)

    def _observe(self, method: str, route: str, status: int, elapsed_s: float) -> None:
        counter = self._counters.get((method, route, status))
        if counter is None:
            counter = self._counters[(method, route, status)] = REQUESTS.labels(method, route, str(status))
        histogram = self._histograms.get((method, route))
        if histogram is None:
            histogram = self._histograms[(method, route)] = DURATION.labels(method, route)
        counter.inc()
        histogram.observe(elapsed_s)


def install_request_metrics(app: Starlette) -> None:
    """Count every request the app answers (install before the request id, which wraps it)."""
    wrap_outermost(app, RequestMetricsMiddleware)
