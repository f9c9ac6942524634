"""A generic signed webhook: the JSON body is POSTed with an HMAC-SHA256 signature.

Headers: ``X-Switchboard-Timestamp`` (unix seconds), ``X-Switchboard-Signature``
(``sha256=`` + hex HMAC of ``"<timestamp>.<body>"`` under the shared secret) and
``X-Switchboard-Event-Id`` (the idempotency key: stable across re-sends, receivers
deduplicate on it). Signing the timestamp lets a receiver refuse replays of old bodies.
The org's outgoing webhook (handoffs, budget incidents) goes through this channel too.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time

from services.notifier.channels.base import Channel, Destination, SendResult, post_json

SIGNATURE_HEADER = "X-Switchboard-Signature"
TIMESTAMP_HEADER = "X-Switchboard-Timestamp"
EVENT_ID_HEADER = "X-Switchboard-Event-Id"


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=<hex>`` of ``"<timestamp>.<body>"``: what receivers recompute and compare."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def signed_headers(secret: str | None, body: bytes, *, event_id: str, now: float | None = None) -> dict[str, str]:
    timestamp = str(int(now if now is not None else time.time()))
    headers = {TIMESTAMP_HEADER: timestamp, EVENT_ID_HEADER: event_id}
    if secret:
        headers[SIGNATURE_HEADER] = signature(secret, timestamp, body)
    return headers


class WebhookChannel(Channel):
    name = "webhook"

    async def send(
        self, destination: Destination, text: str, *, idempotency_key: str, from_model: bool = False
    ) -> SendResult:
        """``text`` is the JSON document to deliver (already serialized by the caller)."""
        body = text.encode()
        await post_json(
            self._client,
            destination.base_url,
            content=body,
            headers=signed_headers(destination.secret, body, event_id=idempotency_key),
            timeout_s=self._timeout_s,
        )
        return SendResult(external_id=None)

    @staticmethod
    def document(payload: dict[str, object]) -> str:
        """The canonical JSON the body carries (compact, sorted: the signature covers these bytes)."""
        return json.dumps(payload, separators=(",", ":"), sort_keys=True, default=str)
