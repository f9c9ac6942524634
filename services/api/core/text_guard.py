"""Refuse NUL characters at the door.

PostgreSQL cannot store U+0000 in ``text`` or ``jsonb``; a request carrying one
would otherwise fail deep in a transaction as a 500. One app-wide dependency
rejects it up front with 422 ``validation_error`` for the body, the query
string and the path alike, so no domain has to remember.
"""

from __future__ import annotations

from fastapi import Request

from services.api.core.errors import ValidationFailed

_NUL_MARKERS = (b"\\u0000", b"\x00")


async def reject_nul_characters(request: Request) -> None:
    if "%00" in request.url.query or "%00" in request.url.path or "\x00" in request.url.path:
        raise ValidationFailed("NUL characters are not accepted", details={"where": "url"})
    if request.method in {"POST", "PUT", "PATCH"}:
        body = await request.body()
        if any(marker in body for marker in _NUL_MARKERS):
            raise ValidationFailed("NUL characters are not accepted", details={"where": "body"})
