"""Success bodies are ``{"data": ...}`` [004 §4]; lists add ``next_cursor`` for paging."""

from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import BaseModel

T = TypeVar("T")


class Envelope(BaseModel, Generic[T]):
    data: T


class Page(BaseModel, Generic[T]):
    data: list[T]
    # Opaque; pass it back as ``cursor`` to get the next page. Null on the last page.
    next_cursor: str | None = None
