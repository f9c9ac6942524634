"""Connecting a WhatsApp number from Switchboard: the WAHA session's own API, called for the owner.

Until now an operator configured each WAHA session by hand — its webhook URL, events and HMAC
key copied from the create response — and scanned the QR code in WAHA's dashboard. Here the
API does both through WAHA's HTTP API (``X-Api-Key``):

- :func:`connect` writes the session's webhook (``PUT /api/sessions/{name}``; a session WAHA
  does not have yet is created with ``POST /api/sessions``) and starts it when it is stopped;
  it answers WAHA's status (``STARTING``, ``SCAN_QR_CODE``, ``WORKING``...);
- :func:`qr_code` reads the QR code to scan (``GET /api/{name}/auth/qr`` as JSON:
  ``{mimetype, data}``, the image in base64);
- :func:`disconnect` unlinks the phone and stops the session (``POST /api/sessions/{name}/logout``,
  then ``/stop``): the number stops answering through Switchboard, its config stays in WAHA, and
  ``connect`` plus a new QR scan link it again.

A session's ``base_url`` is the tenant's to set, so every call goes through the egress guard
(``switchboard.egress``), as the notifier's sends do. WAHA's answers never reach logs or errors
beyond their status code: a body could echo the HMAC key or the API key back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

import httpx

from switchboard.egress import EgressPolicy, EgressRefused, GuardedTransport

WEBHOOK_EVENTS: Final = ("message", "message.any", "message.ack", "session.status")
TIMEOUT_S: Final = 10.0


class WahaError(Exception):
    """WAHA could not be reached or refused the call; ``code`` is stable, ``status`` WAHA's (if any)."""

    def __init__(self, code: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


@dataclass(frozen=True, slots=True)
class WahaSession:
    """Where a channel session lives on WAHA and how to call it."""

    base_url: str
    name: str
    api_key: str | None


def webhook_config(url: str, hmac_key: str) -> dict[str, Any]:
    """The session's webhook as WAHA takes it (the same the create response shows for manual setup)."""
    return {"url": url, "events": list(WEBHOOK_EVENTS), "hmac": {"key": hmac_key}}


async def connect(session: WahaSession, webhook: dict[str, Any], egress: EgressPolicy) -> str:
    """Point the session at Switchboard's webhook and start it; WAHA's status afterwards.

    WAHA's ``PUT /api/sessions/{name}`` replaces the session's whole config (and restarts a
    running session), so the config is read first and only our webhook entry is replaced: the
    session's other webhooks, proxy and metadata stay. A session WAHA does not have is created
    (``POST /api/sessions``; WAHA Core only has ``default``, which always exists)."""
    name = quote(session.name, safe="")
    async with _client(session, egress) as client:
        current = await _call(client, "GET", f"/api/sessions/{name}")
        if current.status_code == 404:
            created = await _call(
                client,
                "POST",
                "/api/sessions",
                json={"name": session.name, "start": True, "config": {"webhooks": [webhook]}},
            )
            _expect(created, "create the session")
        else:
            _expect(current, "read the session")
            config = _merged_config(current, webhook)
            _expect(await _call(client, "PUT", f"/api/sessions/{name}", json={"config": config}), "configure it")
        status = _status(await _call(client, "GET", f"/api/sessions/{name}"))
        if status in ("STOPPED", "FAILED"):
            _expect(await _call(client, "POST", f"/api/sessions/{name}/start"), "start the session")
            status = _status(await _call(client, "GET", f"/api/sessions/{name}"))
        return status


async def disconnect(session: WahaSession, egress: EgressPolicy) -> str:
    """Log the linked phone out and stop the session; WAHA's status afterwards. A session WAHA
    does not have (404) is as disconnected as it gets: ``STOPPED``."""
    name = quote(session.name, safe="")
    async with _client(session, egress) as client:
        logout = await _call(client, "POST", f"/api/sessions/{name}/logout")
        if logout.status_code == 404:
            return "STOPPED"
        _expect(logout, "log the phone out")
        _expect(await _call(client, "POST", f"/api/sessions/{name}/stop"), "stop the session")
        return _status(await _call(client, "GET", f"/api/sessions/{name}"))


def _merged_config(current: httpx.Response, webhook: dict[str, Any]) -> dict[str, Any]:
    """The session's config with our webhook in place of any earlier one to the same URL."""
    try:
        config = dict(current.json().get("config") or {})
    except (ValueError, AttributeError, TypeError):
        raise WahaError("channel_bad_answer", "WAHA's session answer was not a session") from None
    listed = config.get("webhooks")  # another tool's config may hold anything here: only a list is one
    others = (
        [w for w in listed if isinstance(w, dict) and w.get("url") != webhook["url"]]
        if isinstance(listed, list)
        else []
    )
    config["webhooks"] = [*others, webhook]
    return config


async def qr_code(session: WahaSession, egress: EgressPolicy) -> dict[str, str]:
    """The QR code to scan with the business's phone: ``{"mimetype", "data"}`` (base64)."""
    name = quote(session.name, safe="")
    async with _client(session, egress) as client:
        response = await _call(
            client, "GET", f"/api/{name}/auth/qr", params={"format": "image"}, headers={"Accept": "application/json"}
        )
    if response.status_code == 422:
        # WAHA shows a QR code only while the session waits for one (SCAN_QR_CODE).
        raise WahaError("channel_not_scanning", "the session is not waiting for a QR code scan", 422)
    _expect(response, "read the QR code")
    try:
        body = response.json()
        return {"mimetype": str(body["mimetype"]), "data": str(body["data"])}
    except (ValueError, KeyError, TypeError):
        raise WahaError("channel_bad_answer", "WAHA's QR code answer was not {mimetype, data}") from None


def _client(session: WahaSession, egress: EgressPolicy) -> httpx.AsyncClient:
    headers = {"X-Api-Key": session.api_key} if session.api_key else {}
    return httpx.AsyncClient(
        base_url=session.base_url.rstrip("/"),
        headers=headers,
        timeout=TIMEOUT_S,
        transport=GuardedTransport(egress),
        follow_redirects=False,
    )


async def _call(client: httpx.AsyncClient, method: str, path: str, **kwargs: Any) -> httpx.Response:
    try:
        return await client.request(method, path, **kwargs)
    except EgressRefused as exc:
        raise WahaError("channel_base_url_refused", f"the session's base_url is refused ({exc.reason})") from None
    except httpx.HTTPError as exc:
        raise WahaError("channel_unreachable", f"WAHA did not answer ({type(exc).__name__})") from None


def _expect(response: httpx.Response, what: str) -> None:
    if response.status_code in (401, 403):
        raise WahaError("channel_unauthorized", f"WAHA refused the API key trying to {what}", response.status_code)
    if not response.is_success:
        raise WahaError(
            "channel_refused", f"WAHA answered {response.status_code} trying to {what}", response.status_code
        )


def _status(response: httpx.Response) -> str:
    _expect(response, "read the session's status")
    try:
        return str(response.json()["status"])
    except (ValueError, KeyError, TypeError):
        raise WahaError("channel_bad_answer", "WAHA's session answer had no status") from None
