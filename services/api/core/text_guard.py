"""Refuse NUL characters at the door.

PostgreSQL cannot store U+0000 in ``text`` or ``jsonb``; a request carrying one
would otherwise fail deep in a transaction as a 500. One app-wide dependency
rejects it up front with 422 ``validation_error`` for the body, the query
string and the path alike, so no domain has to remember.

Channel webhooks are exempt: a customer's message must never be refused (the
channel would retry it forever), so the webhook strips NUL characters itself.
"""

from __future__ import annotations

from fastapi import Request

from services.api.core.errors import ValidationFailed

_NUL_MARKERS = (b"\\u0000", b"\x00")


WEBHOOK_PREFIX = "/api/v1/webhooks/"


async def reject_nul_characters(request: Request) -> None:
    if request.url.path.startswith(WEBHOOK_PREFIX):
        return
    if "%00" in request.url.query or "%00" in request.url.path or "\x00" in request.url.path:
        raise ValidationFailed("NUL characters are not accepted", details={"where": "url"})
    if request.method in {"POST", "PUT", "PATCH"}:
        body = await request.body()
        if any(marker in body for marker in _NUL_MARKERS):
            raise ValidationFailed("NUL characters are not accepted", details={"where": "body"})
