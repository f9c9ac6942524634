"""``POST /api/v1/webhooks/waha``: WAHA-compatible inbound webhook [004 §4.6].

No bearer token: WAHA proves itself with an HMAC-SHA512 of the raw body keyed
by the channel session's secret (``X-Webhook-Hmac``). The handler answers as
soon as the message row and its outbox record are committed; Kafka is the
relay's business, so a slow or absent broker never slows WAHA down. Deliveries that
arrive together are committed together (``group_commit``).
"""

from __future__ import annotations

import json
import uuid
from typing import Any, ClassVar

from fastapi import APIRouter, Request
from prometheus_client import Counter
from pydantic import ValidationError

from services.api.core.errors import ApiError, Unauthorized, ValidationFailed, error_responses
from services.api.core.responses import Envelope
from services.api.webhooks import service
from services.api.webhooks.group_commit import WebhookGroupCommit
from services.api.webhooks.schemas import WahaEvent, WebhookResult

router = APIRouter(prefix="/api/v1", tags=["webhooks"])

# WAHA can embed media as base64; anything this large is not a chat message we can use.
MAX_BODY_BYTES = 1024 * 1024

DELIVERIES = Counter(
    "switchboard_webhook_deliveries_total",
    "Inbound webhook deliveries, by provider and outcome",
    ["provider", "outcome"],
)


class PayloadTooLarge(ApiError):
    status_code: ClassVar[int] = 413
    code: ClassVar[str] = "payload_too_large"
    default_message: ClassVar[str] = f"The body exceeds {MAX_BODY_BYTES} bytes"


async def _read_body(request: Request) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise PayloadTooLarge()
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise PayloadTooLarge()
        chunks.append(chunk)
    return b"".join(chunks)


def _storable(value: Any) -> Any:
    """PostgreSQL cannot store U+0000 nor a lone UTF-16 surrogate (``"\\ud83d"``: a sender's client
    cut an emoji in half); a customer's message must not be lost for containing one. NUL is
    dropped, a lone surrogate becomes U+FFFD; pairs were joined by the JSON parser already."""
    if isinstance(value, str):
        if not value.isascii():
            value = value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [_storable(item) for item in value]
    if isinstance(value, dict):
        return {_storable(key): _storable(item) for key, item in value.items()}
    return value


def _needs_cleaning(raw: bytes) -> bool:
    """Cheap byte scans on the hot path: only a body that may hold NUL or a surrogate escape
    takes the slower parse."""
    return b"\\u0000" in raw or b"\x00" in raw or b"\\ud" in raw or b"\\uD" in raw


# What pydantic's JSON parser reports for a body nested past its depth limit.
_TOO_DEEP = {"loc": [], "msg": "Invalid JSON: recursion limit exceeded", "type": "json_invalid"}


def _cleaned(raw: bytes) -> Any:
    """The body parsed by ``json.loads`` (which, unlike pydantic's parser, takes lone surrogates) and
    made storable. Deep nesting makes the parser or ``_storable`` raise ``RecursionError``, no
    ``ValueError``: it is refused here as the fast path refuses it, never left to become a 500."""
    try:
        return _storable(json.loads(raw))
    except RecursionError as exc:
        raise ValidationFailed("The body is not a WAHA event", details={"errors": [_TOO_DEEP]}) from exc


def _envelope(raw: bytes) -> WahaEvent:
    try:
        if _needs_cleaning(raw):
            return WahaEvent.model_validate(_cleaned(raw))
        return WahaEvent.model_validate_json(raw)
    except ValidationError as exc:  # before ValueError: pydantic's error is one
        problems = [
            {"loc": [str(p) for p in err.get("loc", ())], "msg": str(err.get("msg", "")), "type": err["type"]}
            for err in exc.errors(include_url=False, include_input=False)
        ]
        raise ValidationFailed("The body is not a WAHA event", details={"errors": problems}) from exc
    except ValueError as exc:  # json.loads: not JSON, or not UTF-8
        raise ValidationFailed("The body is not JSON") from exc


_REQUEST_BODY: dict[str, Any] = {
    "required": True,
    "content": {"application/json": {"schema": WahaEvent.model_json_schema()}},
}
# Documented here, read from the request in the handler: FastAPI's per-parameter dependency
# solving cost a tenth of this hot endpoint's CPU (docs/benchmarks.md "API").
_SIGNATURE_HEADERS: list[dict[str, Any]] = [
    {
        "name": "X-Webhook-Hmac",
        "in": "header",
        "required": False,
        "description": "hex HMAC-SHA512 of the raw body, keyed by the secret",
        "schema": {"type": "string"},
    },
    {
        "name": "X-Webhook-Hmac-Algorithm",
        "in": "header",
        "required": False,
        "description": "`sha512` (the only one accepted)",
        "schema": {"type": "string"},
    },
]


@router.post(
    "/webhooks/waha/{channel_session_id}",
    response_model=Envelope[WebhookResult],
    responses=error_responses(Unauthorized, ValidationFailed, PayloadTooLarge),
    openapi_extra={"requestBody": _REQUEST_BODY, "parameters": _SIGNATURE_HEADERS, "security": []},
)
async def waha_session_webhook(channel_session_id: uuid.UUID, request: Request) -> Envelope[WebhookResult]:
    """Ingest one WAHA event for the session this URL names (its id, from the create response).
    `message`/`message.any` are stored once and dispatched when a customer wrote them; `session.status`
    follows the session's state; other events are acknowledged and ignored. The body must name this
    session (`422 session_mismatch` otherwise); sessions may share a name (WAHA Core's `default`).
    """
    return await _ingest(request, channel_session_id)


@router.post(
    "/webhooks/waha",
    response_model=Envelope[WebhookResult],
    responses=error_responses(Unauthorized, ValidationFailed, PayloadTooLarge),
    openapi_extra={"requestBody": _REQUEST_BODY, "parameters": _SIGNATURE_HEADERS, "security": []},
)
async def waha_webhook(request: Request) -> Envelope[WebhookResult]:
    """Ingest one WAHA event, routed by the session name in the body: only for a session that holds
    its name alone (`webhook.name_routed_path` of its create response). Prefer the per-session URL.
    """
    return await _ingest(request, None)


async def _ingest(request: Request, channel_session_id: uuid.UUID | None) -> Envelope[WebhookResult]:
    try:
        raw = await _read_body(request)
        delivery = service.Delivery(
            raw=raw,
            event=_envelope(raw),
            signature=request.headers.get("x-webhook-hmac"),
            algorithm=request.headers.get("x-webhook-hmac-algorithm"),
            request_id=getattr(request.state, "request_id", None),
            channel_session_id=channel_session_id,
        )
        writer: WebhookGroupCommit = request.app.state.webhook_writer
        result = await writer.submit(delivery)
    except ApiError as exc:
        DELIVERIES.labels("waha", exc.code).inc()
        raise
    outcome = "dispatched" if result.dispatched else result.reason or "stored"
    DELIVERIES.labels("waha", outcome).inc()
    return Envelope(data=result)
