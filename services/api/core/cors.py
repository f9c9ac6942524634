"""Browsers on other origins (a web UI): CORS for the origins ``API_CORS_ORIGINS`` lists, none by default.

The API authenticates with bearer tokens, never cookies, so credentials mode stays off: a page
on an allowed origin can call the API only with a token it was given. Preflights allow the
methods and request headers the API uses; ``X-Request-Id`` is readable by the page, so a UI
can quote it when something fails (docs/api.md, "Browsers").
"""

from __future__ import annotations

from urllib.parse import urlsplit

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp

from services.api.core.outermost import wrap_outermost

ALLOWED_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
ALLOWED_HEADERS = ("Authorization", "Content-Type", "Idempotency-Key", "X-Request-Id", "Last-Event-ID")
EXPOSED_HEADERS = ("X-Request-Id", "Retry-After")
PREFLIGHT_MAX_AGE_S = 600


def parse_origins(value: str) -> tuple[str, ...]:
    """The origins of a comma-separated setting; raises ``ValueError`` for one that is not an origin."""
    origins = []
    for raw in value.split(","):
        origin = raw.strip().rstrip("/")
        if not origin:
            continue
        if origin != "*":
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.path or parts.query:
                raise ValueError(f"{origin!r} is not an origin (scheme://host[:port], nothing after it)")
        origins.append(origin)
    return tuple(origins)


def install_cors(app: FastAPI, origins: tuple[str, ...]) -> None:
    """Answer preflights and add the CORS headers for ``origins`` as the outermost layer; nothing without any.

    Outermost (like ``install_request_id``): ``add_middleware`` would put CORS inside Starlette's
    ``ServerErrorMiddleware``, and a 500 would then reach the page as a CORS failure, its
    ``X-Request-Id`` unreadable. Install it before the request id, which then wraps it.
    """
    if not origins:
        return

    def layer(inner: ASGIApp) -> ASGIApp:
        return CORSMiddleware(
            inner,
            allow_origins=list(origins),
            allow_methods=list(ALLOWED_METHODS),
            allow_headers=list(ALLOWED_HEADERS),
            expose_headers=list(EXPOSED_HEADERS),
            allow_credentials=False,
            max_age=PREFLIGHT_MAX_AGE_S,
        )

    wrap_outermost(app, layer)
