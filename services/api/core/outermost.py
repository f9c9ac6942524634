"""Install an ASGI layer outside Starlette's own middleware stack.

``app.add_middleware`` places a layer inside ``ServerErrorMiddleware``, so the 500 answer of
the catch-all handler would pass it by: leave without ``X-Request-Id``, reach a browser as a
CORS failure, go uncounted in the request metrics. Layers installed here wrap the whole
stack; the last one installed is the outermost.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.applications import Starlette
from starlette.types import ASGIApp


def wrap_outermost(app: Starlette, layer: Callable[[ASGIApp], ASGIApp]) -> None:
    """Make ``layer(stack)`` the outermost layer of ``app``, around what was outermost before."""
    build_inner_stack = app.build_middleware_stack

    def build_middleware_stack() -> ASGIApp:
        return layer(build_inner_stack())

    app.build_middleware_stack = build_middleware_stack  # type: ignore[method-assign]
