"""HTTP endpoints of the credentials domain."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/api/v1", tags=["credentials"])
