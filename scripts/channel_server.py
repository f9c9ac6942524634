"""A local WAHA-compatible channel server that records what it is asked to send.

Used by the notifier's tests and by ``make demo`` in place of a real WhatsApp session.
It speaks the one call the notifier makes, ``POST /api/sendText`` with
``{"session", "chatId", "text"}`` and the ``X-Api-Key`` header (401 when wrong), and
answers 201 with a WAHA-like message object. ``GET /api/received`` lists what it got.

Tests drive it in-process::

    server = await ChannelServer(api_key="k").start()
    server.fail_next(503)                 # the next sendText answers 503
    sent = await server.wait_for(1, timeout=10)
    await server.stop()

and people run it as ``python -m scripts.channel_server --port 3000 --api-key KEY``,
which prints each message as it arrives ("→ customer <chatId>: <text>").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import sys
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from aiohttp import web


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


class ChannelServer:
    """Start with ``await start()``; ``url`` is then ``http://host:port``."""

    def __init__(
        self,
        api_key: str,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        on_message: Callable[[SentText], None] | None = None,
    ) -> None:
        self._api_key = api_key
        self._host = host
        self._port = port
        self._on_message = on_message
        self.received: list[SentText] = []
        self._failures: list[int] = []
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.url = ""

    # ------------------------------------------------------------------ life cycle

    async def start(self) -> ChannelServer:
        app = web.Application()
        app.router.add_post("/api/sendText", self._send_text)
        app.router.add_get("/api/received", self._list_received)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        port = self._runner.addresses[0][1]  # the bound port (``port=0`` picks a free one)
        self.url = f"http://{self._host}:{port}"
        return self

    async def stop(self) -> None:
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

    def recover(self) -> None:
        """Forget the failures still queued: the next sendText calls succeed."""
        self._failures.clear()

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

    async def _list_received(self, request: web.Request) -> web.Response:
        return web.json_response([s.as_json() for s in self.received])


def _print(sent: SentText) -> None:
    suffix = "" if sent.status_returned == 201 else f"  [answered {sent.status_returned}]"
    print(f"→ customer {sent.chat_id}: {sent.text}{suffix}", flush=True)


async def _serve(host: str, port: int, api_key: str) -> None:
    server = await ChannelServer(api_key, host, port, on_message=_print).start()
    print(f"WAHA-compatible channel server on {server.url} (POST /api/sendText, GET /api/received)", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A local WAHA-compatible server that prints what it is sent.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3000)
    parser.add_argument("--api-key", required=True, help="the X-Api-Key callers must send")
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.host, args.port, args.api_key))
    return 0


if __name__ == "__main__":
    sys.exit(main())
