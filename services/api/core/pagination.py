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


def decode_cursor(cursor: str | None) -> tuple[datetime, uuid.UUID] | None:
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, row_id = json.loads(raw)
        return datetime.fromisoformat(created_at), uuid.UUID(row_id)
    except (ValueError, TypeError) as exc:
        raise ValidationFailed("The cursor is not one this API issued", details={"field": "cursor"}) from exc


def older_than(
    key: ColumnElement[datetime] | InstrumentedAttribute[datetime],
    row_id: InstrumentedAttribute[uuid.UUID],
    cursor: tuple[datetime, uuid.UUID],
) -> ColumnElement[bool]:
    """The rows after the cursor in newest-first ``(key, id)`` order (a row comparison)."""
    return tuple_(key, row_id) < tuple_(*cursor)
