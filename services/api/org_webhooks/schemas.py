"""Request and response bodies of the org webhook endpoints.

The signing secret travels one way: returned by ``PUT`` only (each ``PUT`` issues a new
one, so a lost secret is replaced by setting the webhook again); views never hold it.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from switchboard.egress import refuse_literal_address

SIGNATURE_HEADER = "X-Switchboard-Signature"
EVENT_TYPES = [
    "conversation.handoff",
    "conversation.unanswered",
    "message.undelivered",
    "budget.incident",
    "channel.disconnected",
    "home.digest",
]


class SetOrgWebhook(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, max_length=500, description="Where events are POSTed (http or https)")

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("must be an http(s) URL with a host")
        if parts.username or parts.password:
            raise ValueError("must not embed credentials")
        refuse_literal_address(parts.hostname or "")
        return value


class Signing(BaseModel):
    """How receivers verify a delivery (docs/notifier.md)."""

    algorithm: str = "hmac-sha256"
    signature_header: str = SIGNATURE_HEADER
    timestamp_header: str = "X-Switchboard-Timestamp"
    event_id_header: str = "X-Switchboard-Event-Id"
    signed_content: str = "<timestamp>.<raw body>"


class OrgWebhookView(BaseModel):
    id: uuid.UUID
    url: str
    events: list[str] = EVENT_TYPES
    signing: Signing = Signing()
    created_at: datetime
    updated_at: datetime


class OrgWebhookIssued(OrgWebhookView):
    secret: str = Field(description="The HMAC-SHA256 key of the signatures; shown this once")
