"""WAHA webhook bodies and the webhook's answer.

The envelope is checked first and loosely (it names the session, which decides
the secret); the ``payload`` is validated by event type only after the
signature is verified, so an unauthenticated caller learns nothing beyond
"this is not a WAHA event".
"""

from __future__ import annotations

import math
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# Events whose payload is a message; ``message.any`` also carries the business's own messages.
MESSAGE_EVENTS = frozenset({"message", "message.any"})
SESSION_STATUS_EVENT = "session.status"
# The channel's receipt for a message the business's number sent: server, device, read, played, or an error.
ACK_EVENT = "message.ack"


class WahaEvent(BaseModel):
    """The envelope of every WAHA webhook delivery (unknown extra fields are kept and ignored)."""

    model_config = ConfigDict(extra="allow")

    id: str | None = Field(default=None, max_length=200, description="WAHA's id of this delivery")
    timestamp: float | None = Field(default=None, description="When WAHA emitted the event (ms since epoch)")
    event: str = Field(min_length=1, max_length=100, description="`message`, `message.any`, `session.status`, ...")
    session: str = Field(min_length=1, max_length=100, description="The WAHA session name (routes to the org)")
    payload: dict[str, Any] = Field(description="Event-specific; for messages see `WahaMessage`")


def _coordinate(value: object) -> float | None:
    """A latitude or longitude as engines send it: a number, or a number in a string."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


class WahaMessage(BaseModel):
    """``payload`` of a ``message`` / ``message.any`` event."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    id: str = Field(min_length=1, max_length=256, description="The channel's message id: the idempotency key")
    timestamp: float | None = Field(default=None, ge=0, description="Seconds since epoch (ms accepted)")
    from_: str = Field(alias="from", min_length=1, max_length=200, description="Chat id the message came from")
    from_me: bool = Field(default=False, alias="fromMe", description="Sent by the business's own number")
    to: str | None = Field(default=None, max_length=200)
    body: str | None = Field(default=None, max_length=65536)
    participant: str | None = Field(default=None, max_length=200, description="Sender inside a group chat")
    has_media: bool = Field(default=False, alias="hasMedia")
    media: dict[str, Any] | None = None
    location: dict[str, Any] | None = Field(default=None, description="A shared location: latitude, longitude")
    # The engine's raw message: WEBJS puts the sender's WhatsApp name in ``notifyName``, NOWEB in ``pushName``.
    engine_data: dict[str, Any] | None = Field(default=None, alias="_data")

    @property
    def location_text(self) -> str | None:
        """A shared location as text ("description (latitude, longitude)"); None when none was shared."""
        location = self.location or {}
        lat, lng = _coordinate(location.get("latitude")), _coordinate(location.get("longitude"))
        if lat is None or lng is None:
            return None
        place = " ".join(str(location.get(k) or "").strip() for k in ("name", "description", "address"))
        return f"{' '.join(place.split())} ({lat}, {lng})".strip()

    @property
    def sender_name(self) -> str | None:
        """The name the sender gave themselves on WhatsApp, if the engine passed one on."""
        data = self.engine_data or {}
        for key in ("notifyName", "pushName"):
            value = data.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip()[:200]
        return None


class WahaSessionStatus(BaseModel):
    """``payload`` of a ``session.status`` event."""

    model_config = ConfigDict(extra="allow")

    status: str = Field(min_length=1, max_length=50)


class WahaAck(BaseModel):
    """``payload`` of a ``message.ack`` event: which own message, and how far it got."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    id: str = Field(min_length=1, max_length=256, description="The channel's id of the message acknowledged")
    ack: int | None = Field(
        default=None, ge=-1, le=4, description="-1 error, 0 pending, 1 server, 2 device, 3 read, 4 played"
    )
    ack_name: str | None = Field(
        default=None, alias="ackName", max_length=20, description="ERROR, PENDING, SERVER, DEVICE, READ, PLAYED"
    )


class WebhookResult(BaseModel):
    """What ingest did: ``reason`` says why nothing was dispatched (null when dispatched)."""

    message_id: uuid.UUID | None = Field(description="The stored message (the existing one for a duplicate)")
    dispatched: bool = Field(description="A `dispatch_requested` record was written to the outbox")
    duplicate: bool = Field(description="This message was already ingested; nothing was stored or dispatched")
    reason: str | None = Field(
        default=None,
        description="`duplicate`, `echo` (the channel's copy of a message the platform sent), `group`, `from_me`,"
        " `human_handoff`, `broadcast`, `session_status`, `session_status_stale` (a report older than the"
        " status's: nothing changed), `event_ignored`,"
        " `slash_todo` (a /todo item was added instead of storing a message), `delivery_ack` (a receipt;"
        " `message_id` is the message it advanced, null when none did)",
    )
