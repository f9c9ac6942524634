"""A local WAHA-compatible channel server that records what it is asked to send.

Used by the notifier's tests and by ``make demo`` in place of a real WhatsApp session.
It speaks the one call the notifier makes, ``POST /api/sendText`` with
``{"session", "chatId", "text"}`` and the ``X-Api-Key`` header (401 when wrong), and
answers 201 with a WAHA-like message object. ``GET /api/received`` lists what it got.

Like WAHA, it calls back: a session configured with ``PUT /api/sessions/{session}``
(``{"config": {"webhooks": [{"url", "events", "hmac": {"key"}}]}}``, WAHA's own shape) gets,
for every text it sent, the ``message.any`` echo of that message (``fromMe``; delivered
*before* the sendText answer, the order WAHA may use and the harder one for the caller, who
does not know the message's id yet) and its ``message.ack`` receipts (DEVICE, then READ,
after the answer), signed as WAHA signs (``X-Webhook-Hmac``: hex HMAC-SHA512 of the body). Sessions
without a configuration get no callbacks.

Tests drive it in-process::

    server = await ChannelServer(api_key="k").start()
    server.fail_next(503)                 # the next sendText answers 503
    sent = await server.wait_for(1, timeout=10)
    await server.stop()

and people run it as ``CHANNEL_SERVER_API_KEY=KEY python -m scripts.channel_server --port 3000``
(or ``--api-key KEY``, which ``ps`` shows to every local user), which prints each message as
it arrives ("→ customer <chatId>: <text>").

It also stands in for the business's own side of Switchboard's outgoing webhook (``make
demo`` points the org webhook here): ``POST /hooks/org`` records each signed event —
handoffs, the morning digest — with its headers and raw body, and ``GET /api/org-events``
lists them ("→ owner <type>" when printing).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
from aiohttp import web

# Where the key callers must send comes from when ``--api-key`` is not given.
API_KEY_ENV = "CHANNEL_SERVER_API_KEY"
# The receipts sent for each delivered text, in order: (ack, ackName).
RECEIPTS = ((2, "DEVICE"), (3, "READ"))
# How long the sendText answer waits for the echo's delivery at most.
ECHO_WAIT_S = 5.0
# The business's own number, as the callbacks name it.
OWN_NUMBER = "5511900000000@c.us"


def _own(sent: SentText, message_id: str) -> dict[str, Any]:
    return {"id": message_id, "from": OWN_NUMBER, "fromMe": True, "to": sent.chat_id, "hasMedia": False}


def signed_headers(secret: str, body: bytes) -> dict[str, str]:
    """WAHA's webhook signature: hex HMAC-SHA512 of the raw body keyed by the session's secret."""
    return {
        "Content-Type": "application/json",
        "X-Webhook-Hmac": hmac.new(secret.encode(), body, hashlib.sha512).hexdigest(),
        "X-Webhook-Hmac-Algorithm": "sha512",
    }


@dataclass(frozen=True)
class SessionWebhook:
    """Where a session's events go (WAHA's ``config.webhooks[0]``)."""

    url: str
    events: frozenset[str]
    key: str


@dataclass(frozen=True)
class SentText:
    """One sendText call as received (failed ones included, with the status they got)."""

    session: str
    chat_id: str
    text: str
    received_at: datetime
    status_returned: int

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["received_at"] = self.received_at.isoformat()
        return data


@dataclass(frozen=True)
class OrgEvent:
    """One POST of Switchboard's org webhook, as received (verify it with the webhook's secret)."""

    headers: dict[str, str]
    body: bytes
    received_at: datetime

    @property
    def document(self) -> dict[str, Any]:
        parsed = json.loads(self.body)
        return parsed if isinstance(parsed, dict) else {}

    def as_json(self) -> dict[str, Any]:
        return {
            "headers": self.headers,
            "body": self.body.decode(),
            "received_at": self.received_at.isoformat(),
        }


ORG_HOOK_PATH = "/hooks/org"


class ChannelServer:
    """Start with ``await start()``; ``url`` is then ``http://host:port``."""

    def __init__(
        self,
        api_key: str,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        on_message: Callable[[SentText], None] | None = None,
        on_org_event: Callable[[OrgEvent], None] | None = None,
        strict_sessions: bool = False,
    ) -> None:
        self._api_key = api_key
        self._host = host
        self._port = port
        self._on_message = on_message
        self._on_org_event = on_org_event
        self.received: list[SentText] = []
        self.org_events: list[OrgEvent] = []
        self.webhooks: dict[str, SessionWebhook] = {}
        # ``strict_sessions``: as WAHA Plus, a session exists once created (PUT on another is 404),
        # and it keeps its whole config (``configs``); otherwise any name is taken, as the demo needs.
        self._strict = strict_sessions
        self.configs: dict[str, dict[str, Any]] = {}
        self.sessions_created: list[str] = []
        self.logged_out: list[str] = []
        # Callbacks the webhook answered with something else than 2xx, or that failed: (event, status).
        self.callback_failures: list[tuple[str, int]] = []
        self._callbacks: set[asyncio.Task[None]] = set()
        self._client: aiohttp.ClientSession | None = None
        self._failures: list[int] = []
        self._failures_after_send: list[int] = []
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.url = ""

    # ------------------------------------------------------------------ life cycle

    async def start(self) -> ChannelServer:
        app = web.Application()
        app.router.add_post("/api/sendText", self._send_text)
        app.router.add_get("/api/received", self._list_received)
        app.router.add_put("/api/sessions/{session}", self._configure_session)
        app.router.add_post("/api/sessions", self._create_session)
        app.router.add_get("/api/sessions/{session}", self._session_status)
        app.router.add_post("/api/sessions/{session}/start", self._start_session)
        app.router.add_post("/api/sessions/{session}/logout", self._logout_session)
        app.router.add_post("/api/sessions/{session}/stop", self._stop_session)
        app.router.add_get("/api/{session}/auth/qr", self._qr)
        app.router.add_post(ORG_HOOK_PATH, self._org_event)
        app.router.add_get("/api/org-events", self._list_org_events)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        port = self._runner.addresses[0][1]  # the bound port (``port=0`` picks a free one)
        self.url = f"http://{self._host}:{port}"
        return self

    async def stop(self) -> None:
        for task in list(self._callbacks):
            task.cancel()
        await asyncio.gather(*self._callbacks, return_exceptions=True)
        if self._client is not None:
            await self._client.close()
            self._client = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> ChannelServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ test controls

    def fail_next(self, status: int, times: int = 1) -> None:
        """Answer the next ``times`` sendText calls with ``status`` (recorded like the others)."""
        self._failures.extend([status] * times)

    def fail_next_after_sending(self, status: int, times: int = 1) -> None:
        """The next ``times`` sendText calls send the message (echo and receipts included) and then
        answer ``status``: a server error after the fact, whose sender cannot tell it went out."""
        self._failures_after_send.extend([status] * times)

    def recover(self) -> None:
        """Forget the failures still queued: the next sendText calls succeed."""
        self._failures.clear()
        self._failures_after_send.clear()

    async def wait_for(self, count: int, timeout: float) -> list[SentText]:
        """Until at least ``count`` calls were received (any status); TimeoutError otherwise."""

        async def _enough() -> None:
            async with self._changed:
                await self._changed.wait_for(lambda: len(self.received) >= count)

        await asyncio.wait_for(_enough(), timeout)
        return list(self.received)

    @property
    def delivered(self) -> list[SentText]:
        """The calls that were answered 201 (what the customer would have received)."""
        return [s for s in self.received if s.status_returned == 201]

    # ------------------------------------------------------------------ HTTP

    async def _send_text(self, request: web.Request) -> web.Response:
        if not hmac.compare_digest(request.headers.get("X-Api-Key", ""), self._api_key):
            return web.json_response({"error": "invalid api key"}, status=401)
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": "body must be JSON"}, status=400)
        if not isinstance(body, dict) or not all(isinstance(body.get(k), str) for k in ("session", "chatId", "text")):
            return web.json_response({"error": "session, chatId and text are required strings"}, status=400)
        status = self._failures.pop(0) if self._failures else 201
        sent = SentText(body["session"], body["chatId"], body["text"], datetime.now(UTC), status)
        async with self._changed:
            self.received.append(sent)
            self._changed.notify_all()
        if self._on_message is not None:
            self._on_message(sent)
        if status != 201:
            return web.json_response({"error": f"simulated failure {status}"}, status=status)
        message_id = f"true_{sent.chat_id}_{uuid.uuid4().hex[:20].upper()}"
        await self._echo(sent, message_id)
        self._send_receipts(sent, message_id)
        if self._failures_after_send:
            failure = self._failures_after_send.pop(0)
            return web.json_response({"error": f"simulated failure {failure} after sending"}, status=failure)
        return web.json_response(
            {
                "id": message_id,
                "timestamp": int(sent.received_at.timestamp()),
                "from": "me",
                "fromMe": True,
                "to": sent.chat_id,
                "body": sent.text,
                "_data": {"id": {"fromMe": True, "remote": sent.chat_id, "_serialized": message_id}},
            },
            status=201,
        )

    async def _configure_session(self, request: web.Request) -> web.Response:
        """WAHA's ``PUT /api/sessions/{name}``: the session's webhook (any session: WAHA Core's
        ``default`` always exists). Like the sends, it needs the API key when called with one."""
        if not self._authorized(request, optional=True):
            return web.json_response({"error": "invalid api key"}, status=401)
        name = request.match_info["session"]
        if self._strict and name not in self.configs:
            return web.json_response({"error": f"session {name!r} not found"}, status=404)
        return await self._store_webhook(request, name)

    async def _create_session(self, request: web.Request) -> web.Response:
        """WAHA's ``POST /api/sessions``: ``{name, start, config}``."""
        if not self._authorized(request):
            return web.json_response({"error": "invalid api key"}, status=401)
        try:
            name = str((await request.json())["name"])
        except (ValueError, KeyError, TypeError):
            return web.json_response({"error": "name is required"}, status=400)
        self.sessions_created.append(name)
        return await self._store_webhook(request, name, status=201)

    async def _store_webhook(self, request: web.Request, name: str, status: int = 200) -> web.Response:
        try:
            body = await request.json()
            # The signed one is where events go here (WAHA calls every webhook; other tools' are kept).
            hook = [h for h in body["config"]["webhooks"] if isinstance(h, dict) and "hmac" in h][-1]
            webhook = SessionWebhook(str(hook["url"]), frozenset(hook.get("events") or ()), str(hook["hmac"]["key"]))
        except (ValueError, KeyError, IndexError, TypeError):
            return web.json_response({"error": "config.webhooks needs one with url, events and hmac.key"}, status=400)
        self.webhooks[name] = webhook
        self.configs[name] = body["config"]
        return web.json_response({"name": name, "status": "WORKING"}, status=status)

    def add_session(self, name: str, config: dict[str, Any]) -> None:
        """A session WAHA already has (its config as another tool left it)."""
        self.configs[name] = config

    async def _session_status(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"error": "invalid api key"}, status=401)
        name = request.match_info["session"]
        if self._strict and name not in self.configs:
            return web.json_response({"error": f"session {name!r} not found"}, status=404)
        status = "WORKING" if name in self.webhooks else "STOPPED"
        return web.json_response({"name": name, "status": status, "config": self.configs.get(name, {})})

    async def _start_session(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"error": "invalid api key"}, status=401)
        return web.json_response({"name": request.match_info["session"], "status": "STARTING"}, status=201)

    async def _logout_session(self, request: web.Request) -> web.Response:
        """WAHA's logout: the phone is unlinked (the session's config stays)."""
        if not self._authorized(request):
            return web.json_response({"error": "invalid api key"}, status=401)
        name = request.match_info["session"]
        if self._strict and name not in self.configs:
            return web.json_response({"error": f"session {name!r} not found"}, status=404)
        self.logged_out.append(name)
        return web.json_response({"name": name}, status=201)

    async def _stop_session(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"error": "invalid api key"}, status=401)
        name = request.match_info["session"]
        self.webhooks.pop(name, None)  # a stopped session sends no events (and reads STOPPED)
        return web.json_response({"name": name, "status": "STOPPED"}, status=201)

    async def _qr(self, request: web.Request) -> web.Response:
        """WAHA's QR code as JSON (``Accept: application/json``): a 1x1 PNG stands in for it here."""
        if not self._authorized(request):
            return web.json_response({"error": "invalid api key"}, status=401)
        return web.json_response({"mimetype": "image/png", "data": _QR_PLACEHOLDER_PNG})

    def _authorized(self, request: web.Request, *, optional: bool = False) -> bool:
        """The API key matches (``optional``: or none was sent, as the demo's own setup does)."""
        given = request.headers.get("X-Api-Key")
        if given is None and optional:
            return True
        return hmac.compare_digest(given or "", self._api_key)

    async def _echo(self, sent: SentText, message_id: str) -> None:
        """The ``message.any`` copy of a delivered text, before the sendText answer (bounded wait)."""
        webhook = self.webhooks.get(sent.session)
        if webhook is None or "message.any" not in webhook.events:
            return
        echo = {**_own(sent, message_id), "timestamp": int(sent.received_at.timestamp()), "body": sent.text}
        try:
            await asyncio.wait_for(self._post_event(webhook, sent.session, "message.any", echo), ECHO_WAIT_S)
        except TimeoutError:
            self.callback_failures.append(("message.any", 0))

    def _send_receipts(self, sent: SentText, message_id: str) -> None:
        """The receipts of a delivered text, in the background after the answer."""
        webhook = self.webhooks.get(sent.session)
        if webhook is None or "message.ack" not in webhook.events:
            return

        async def receipts() -> None:
            for ack, name in RECEIPTS:
                payload = {**_own(sent, message_id), "ack": ack, "ackName": name}
                await self._post_event(webhook, sent.session, "message.ack", payload)

        task = asyncio.create_task(receipts())
        self._callbacks.add(task)
        task.add_done_callback(self._callbacks.discard)

    async def _post_event(self, webhook: SessionWebhook, session: str, event: str, payload: dict[str, Any]) -> None:
        envelope = {
            "id": f"evt_{uuid.uuid4().hex}",
            "timestamp": int(time.time() * 1000),
            "event": event,
            "session": session,
            "payload": payload,
        }
        body = json.dumps(envelope).encode()
        if self._client is None:
            self._client = aiohttp.ClientSession()
        try:
            async with self._client.post(webhook.url, data=body, headers=signed_headers(webhook.key, body)) as answer:
                if answer.status >= 300:
                    self.callback_failures.append((event, answer.status))
        except aiohttp.ClientError:
            self.callback_failures.append((event, 0))

    async def _list_received(self, request: web.Request) -> web.Response:
        return web.json_response([s.as_json() for s in self.received])

    async def _org_event(self, request: web.Request) -> web.Response:
        event = OrgEvent(dict(request.headers), await request.read(), datetime.now(UTC))
        self.org_events.append(event)
        if self._on_org_event is not None:
            self._on_org_event(event)
        return web.Response(status=204)

    async def _list_org_events(self, request: web.Request) -> web.Response:
        return web.json_response([e.as_json() for e in self.org_events])


# A transparent 1x1 PNG, base64: what the fake WAHA shows as its QR code.
_QR_PLACEHOLDER_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="


def _print(sent: SentText) -> None:
    suffix = "" if sent.status_returned == 201 else f"  [answered {sent.status_returned}]"
    print(f"→ customer {sent.chat_id}: {sent.text}{suffix}", flush=True)


def _print_org_event(event: OrgEvent) -> None:
    document = event.document
    data = document.get("data")
    detail = (data.get("summary") or data.get("reason") or "") if isinstance(data, dict) else ""
    print(f"→ owner {document.get('type')}: {detail}".rstrip(": "), flush=True)


async def _serve(host: str, port: int, api_key: str) -> None:
    server = await ChannelServer(api_key, host, port, on_message=_print, on_org_event=_print_org_event).start()
    print(f"WAHA-compatible channel server on {server.url} (POST /api/sendText, GET /api/received)", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A local WAHA-compatible server that prints what it is sent.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3000)
    parser.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV),
        help=f"the X-Api-Key callers must send (default: ${API_KEY_ENV}; the environment keeps it out of ps)",
    )
    args = parser.parse_args(argv)
    if not args.api_key:
        parser.error(f"an API key is required: ${API_KEY_ENV} or --api-key")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.host, args.port, args.api_key))
    return 0


if __name__ == "__main__":
    sys.exit(main())
