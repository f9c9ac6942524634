"""Request and response bodies of the channel session endpoints.

Secrets travel one way: the webhook secret is returned only by create and
``:rotate-secret`` (``ChannelSessionCreated``); the provider API key is accepted
and never returned (views say only whether one is stored).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from switchboard.db.enums import ChannelProvider, ChannelSessionStatus
from switchboard.db.models.channels import E164_PATTERN
from switchboard.egress import refuse_literal_address
from switchboard.server_urls import canonical_server_url

# WAHA session names: letters, digits and a few separators; they are routing keys, not text.
SESSION_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.@:-]{0,99}$"
WEBHOOK_PATH = "/api/v1/webhooks/waha"
OWNER_REPLIES_TAKE_OVER = (
    "Whether a message typed on this number's phone to a customer (not one Switchboard sent) takes the "
    "conversation over from the agents, like `:takeover`; turn it off when other tools also send through the number. "
    "The WhatsApp Business app's automatic greeting and away messages count as typed: turn those off in the app"
)


def _http_url(value: str | None) -> str | None:
    if value is None:
        return None
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http(s) URL with a host")
    if parts.username or parts.password:
        raise ValueError("must not embed credentials; send the API key in api_key")
    if parts.query or parts.fragment or "?" in value or "#" in value:
        raise ValueError("must not have a query or a fragment: WAHA's API paths are appended to it")
    if any(unquote(segment) in (".", "..") for segment in parts.path.split("/")):
        raise ValueError("must not have '.' or '..' path segments")  # one server, one spelling
    refuse_literal_address(parts.hostname)
    return canonical_server_url(value)  # one server, one spelling: the per-server name check compares text


class CreateChannelSession(BaseModel):
    model_config = ConfigDict(extra="forbid")

    label: str = Field(min_length=1, max_length=100, description="A name people recognise, e.g. 'Sales line'")
    external_session: str = Field(
        pattern=SESSION_NAME_PATTERN,
        description="The WAHA session name, exactly as WAHA sends it in webhooks (WAHA Core: `default`)",
    )
    phone_number: str | None = Field(default=None, pattern=E164_PATTERN, description="E.164, e.g. +5511999999999")
    base_url: str | None = Field(
        default=None, max_length=500, description="The WAHA server for outbound sends; null: the platform default"
    )
    api_key: SecretStr | None = Field(
        default=None, min_length=1, max_length=500, description="WAHA `X-Api-Key` for outbound sends; never returned"
    )
    owner_replies_take_over: bool = Field(default=True, description=OWNER_REPLIES_TAKE_OVER)

    _check_url = field_validator("base_url")(_http_url)


class UpdateChannelSession(BaseModel):
    """Only the properties sent change; ``api_key: null`` removes the stored key."""

    model_config = ConfigDict(extra="forbid")

    label: str | None = Field(default=None, min_length=1, max_length=100)
    phone_number: str | None = Field(default=None, pattern=E164_PATTERN)
    base_url: str | None = Field(default=None, max_length=500)
    api_key: SecretStr | None = Field(default=None, min_length=1, max_length=500)
    owner_replies_take_over: bool | None = Field(default=None, description=OWNER_REPLIES_TAKE_OVER)

    _check_url = field_validator("base_url")(_http_url)

    @field_validator("label", "owner_replies_take_over")
    @classmethod
    def _not_null(cls, value: str | bool | None) -> str | bool:
        if value is None:
            raise ValueError("cannot be null")
        return value


class WebhookSetup(BaseModel):
    """How to configure the WAHA session's webhook so Switchboard accepts its deliveries."""

    path: str = Field(description="This session's own webhook path, `/api/v1/webhooks/waha/{id}`: use it")
    name_routed_path: str | None = Field(
        default=None,
        description="`/api/v1/webhooks/waha`, which routes by the session name in the body, when this "
        "session holds its name alone (older setups); null: only `path` reaches this session",
    )
    events: list[str] = ["message", "message.any", "message.ack", "session.status"]
    hmac_algorithm: Literal["sha512"] = "sha512"
    signature_header: str = "X-Webhook-Hmac"


class ChannelSessionView(BaseModel):
    """A channel session as anyone with access may see it: no secret, ever."""

    id: uuid.UUID
    provider: ChannelProvider
    external_session: str
    label: str
    phone_number: str | None
    status: ChannelSessionStatus
    base_url: str | None
    owner_replies_take_over: bool
    has_webhook_secret: bool
    has_api_key: bool
    webhook_secret_rotated_at: datetime | None
    archived_at: datetime | None = Field(
        default=None, description="When the session was archived (`:archive`); null while it is live"
    )
    created_at: datetime
    updated_at: datetime


class ChannelSessionCreated(ChannelSessionView):
    """Returned by create and ``:rotate-secret`` only: the webhook secret is shown this once."""

    webhook_secret: str = Field(description="The HMAC key to set in WAHA's webhook config (`hmac.key`); shown once")
    webhook: WebhookSetup


class ChannelConnected(BaseModel):
    """``:connect``: the WAHA session now sends its events to ``webhook_url``; ``waha_status`` is
    WAHA's (``SCAN_QR_CODE``: scan ``GET …/qr`` with the business's phone). The session's own
    ``status`` follows WAHA's ``session.status`` events, as always."""

    session: ChannelSessionView
    waha_status: str
    webhook_url: str


class ChannelDisconnected(BaseModel):
    """``:disconnect``: the phone is logged out and the WAHA session stopped (``waha_status``, WAHA's);
    the session's ``status`` is ``stopped`` until ``:connect`` and a new QR scan link it again."""

    session: ChannelSessionView
    waha_status: str


class ChannelQrCode(BaseModel):
    """The QR code to scan in WhatsApp (Linked devices): an image, base64."""

    mimetype: str
    data: str
