"""WAHA (WhatsApp HTTP API): ``POST {base_url}/api/sendText`` with ``X-Api-Key``."""

from __future__ import annotations

import json
from typing import Any

from services.notifier.channels.base import Channel, Destination, SendResult, post_json
from services.notifier.channels.whatsapp_text import to_whatsapp


def _message_id(body: Any) -> str | None:
    """WAHA answers a message object whose ``id`` is a string or ``{"_serialized": ...}``."""
    if not isinstance(body, dict):
        return None
    raw = body.get("id")
    if isinstance(raw, dict):
        raw = raw.get("_serialized") or raw.get("id")
    return raw if isinstance(raw, str) and raw else None


class WahaChannel(Channel):
    name = "waha"

    async def send(
        self, destination: Destination, text: str, *, idempotency_key: str, from_model: bool = False
    ) -> SendResult:
        # Models write Markdown; WhatsApp shows its own markup and the rest as typed. What a person
        # typed in the inbox goes as typed.
        shown = to_whatsapp(text) if from_model else text
        payload = {"session": destination.session, "chatId": destination.chat_id, "text": shown}
        headers = {"X-Api-Key": destination.secret} if destination.secret else {}
        response = await post_json(
            self._client,
            f"{destination.base_url.rstrip('/')}/api/sendText",
            content=json.dumps(payload).encode(),
            headers=headers,
            timeout_s=self._timeout_s,
        )
        try:
            body = response.json()
        except ValueError:
            body = None
        return SendResult(external_id=_message_id(body))
