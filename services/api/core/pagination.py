"""Opaque keyset cursors: ``(created_at, id)`` of the last row, base64url-encoded.

Keyset paging (not OFFSET) keeps pages stable while rows are inserted and costs
the same on page 1 and page 1,000.
"""

from __future__ import annotations

import base64
import json
import uuid
from datetime import datetime

from sqlalchemy import ColumnElement, tuple_
from sqlalchemy.orm import InstrumentedAttribute

from services.api.core.errors import ValidationFailed

DEFAULT_LIMIT = 50
MAX_LIMIT = 200


def encode_cursor(created_at: datetime, row_id: uuid.UUID) -> str:
    raw = json.dumps([created_at.isoformat(), str(row_id)]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


# An issued cursor is ~110 characters; anything far longer was not issued here, and
# refusing it before ``json.loads`` keeps deep nesting from reaching the parser.
_MAX_CURSOR_LENGTH = 512


def decode_cursor(cursor: str | None) -> tuple[datetime, uuid.UUID] | None:
    """The ``(created_at, id)`` a cursor carries, or 422 ``validation_error`` (``details.field``
    ``cursor``) for anything this API did not issue.

    The shape is checked before use: a cursor is client input, and any JSON it decodes to
    (numbers, objects, nested lists) must end as a 422, never as an exception escaping to a 500.
    """
    if not cursor:
        return None
    refused = ValidationFailed("The cursor is not one this API issued", details={"field": "cursor"})
    if len(cursor) > _MAX_CURSOR_LENGTH:
        raise refused
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        decoded = json.loads(raw)
        if not (isinstance(decoded, list) and len(decoded) == 2 and all(isinstance(v, str) for v in decoded)):
            raise refused
        created_at, row_id = decoded
        return datetime.fromisoformat(created_at), uuid.UUID(row_id)
    except (ValueError, TypeError, RecursionError) as exc:
        raise refused from exc


def older_than(
    key: ColumnElement[datetime] | InstrumentedAttribute[datetime],
    row_id: InstrumentedAttribute[uuid.UUID],
    cursor: tuple[datetime, uuid.UUID],
) -> ColumnElement[bool]:
    """The rows after the cursor in newest-first ``(key, id)`` order (a row comparison)."""
    return tuple_(key, row_id) < tuple_(*cursor)
