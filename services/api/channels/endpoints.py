"""HTTP endpoints of the channel sessions domain."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/api/v1", tags=["channel sessions"])
