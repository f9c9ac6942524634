"""The end-to-end baseline: a pipeline of the seed's shape (webhook → event_log row → 100 ms poll → model → send).

The seed's design [004 §5]: the webhook stores the inbound message and an
``event_log`` row (``ai_agent.dispatch_requested``); a cron worker polls
``event_log WHERE processed_at IS NULL ORDER BY created_at LIMIT 100``, runs the agent
for each event and sends its reply through WAHA, then marks the event processed.
(The seed's cron fires every 5 s; the dispatch bench and this one use a 100 ms poller,
the generous version of that design.)

This process is that pipeline, cut down to its skeleton so that what is compared is
the *design* (a database queue drained by a poller) and not the amount of work:

- ``POST /webhook``: checks the WAHA signature (HMAC-SHA512 of the body), stores one
  row (``event_type = 'message_received'``, the delivery as payload) in its own
  committed transaction, answers 200;
- a poller: every ``--interval`` seconds (at once again when a poll came back full)
  claims up to 100 unprocessed rows ``FOR UPDATE SKIP LOCKED``, runs the real offline
  demo model (``services.runner.providers.demo.demo_reply``: zero latency) on each,
  sends the replies to the channel server (``POST /api/sendText``, concurrently) and
  marks the rows processed in the same transaction.

No agent lookup, trigger match, run row, trace, budget or outbox: the baseline does far
less per message than Switchboard, so its latency is the poll interval plus almost
nothing. Run by bench/end_to_end.py as its own process:
``python -m bench.e2e_baseline --port P --channel-url URL --session S``, with the
database URL, the webhook secret and the channel key in the environment. The ``event_log`` table is
the dispatch bench's (``bench.dispatch.scratch_database``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import signal
import sys
from typing import Any, Final

import aiohttp
import psycopg
from aiohttp import web

from services.runner.providers.base import ModelRequest, UserMessage
from services.runner.providers.demo import demo_reply

BATCH: Final = 100
WEBHOOK_PATH: Final = "/webhook"

# The database URL, the webhook secret and the channel server's key come in the environment,
# not on the command line (where ``ps`` shows them).
DATABASE_ENV: Final = "E2E_BASELINE_DATABASE_URL"
SECRET_ENV: Final = "E2E_BASELINE_WEBHOOK_SECRET"
CHANNEL_KEY_ENV: Final = "E2E_BASELINE_CHANNEL_API_KEY"


def model_reply(text: str) -> str:
    """The zero-latency model's answer to one customer message (no tools are granted here)."""
    request = ModelRequest(model="demo", system=(), messages=(UserMessage(text),), tools=(), max_output_tokens=256)
    return demo_reply(request).text


class Baseline:
    """The webhook and the poller, sharing one event loop as the seed's API and cron share one database."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.connections: asyncio.Queue[psycopg.AsyncConnection[Any]] = asyncio.Queue()
        self.http: aiohttp.ClientSession | None = None
        self.secret = os.environ[SECRET_ENV].encode()

    async def open(self) -> None:
        for _ in range(self.args.pool):
            self.connections.put_nowait(
                await psycopg.AsyncConnection.connect(os.environ[DATABASE_ENV], autocommit=True)
            )
        self.http = aiohttp.ClientSession(
            base_url=self.args.channel_url,
            headers={"X-Api-Key": os.environ[CHANNEL_KEY_ENV]},
            connector=aiohttp.TCPConnector(limit=64),
        )

    async def close(self) -> None:
        if self.http is not None:
            await self.http.close()
        while not self.connections.empty():
            await self.connections.get_nowait().close()

    async def webhook(self, request: web.Request) -> web.Response:
        body = await request.read()
        expected = hmac.new(self.secret, body, hashlib.sha512).hexdigest()
        if not hmac.compare_digest(request.headers.get("X-Webhook-Hmac", ""), expected):
            return web.json_response({"error": "invalid signature"}, status=401)
        envelope = json.loads(body)
        payload = envelope.get("payload") or {}
        if envelope.get("event") != "message" or payload.get("fromMe"):
            return web.json_response({"data": {"stored": False}})
        connection = await self.connections.get()
        try:
            await connection.execute(
                "INSERT INTO event_log (event_type, payload) VALUES ('message_received', %s)", (body,)
            )
        finally:
            self.connections.put_nowait(connection)
        return web.json_response({"data": {"stored": True}})

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _send(self, payload: dict[str, Any]) -> None:
        assert self.http is not None
        body = {"session": self.args.session, "chatId": payload["from"], "text": model_reply(str(payload["body"]))}
        async with self.http.post("/api/sendText", json=body) as response:
            response.raise_for_status()

    async def poll_once(self, connection: psycopg.AsyncConnection[Any]) -> int:
        """Claim a batch, answer each message, mark them processed: one transaction; how many rows."""
        async with connection.transaction():
            cursor = await connection.execute(
                "SELECT id, payload FROM event_log WHERE processed_at IS NULL AND event_type = 'message_received'"
                " ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED",
                (BATCH,),
            )
            rows = await cursor.fetchall()
            if not rows:
                return 0
            await asyncio.gather(*(self._send(json.loads(bytes(payload))["payload"]) for _, payload in rows))
            await connection.execute(
                "UPDATE event_log SET processed_at = clock_timestamp(), outcome = 'replied' WHERE id = ANY(%s)",
                ([row_id for row_id, _ in rows],),
            )
        return len(rows)

    async def poll(self, stop: asyncio.Event) -> None:
        async with await psycopg.AsyncConnection.connect(os.environ[DATABASE_ENV], autocommit=True) as connection:
            while not stop.is_set():
                if await self.poll_once(connection) < BATCH:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), timeout=self.args.interval)


async def serve(args: argparse.Namespace) -> None:
    baseline = Baseline(args)
    await baseline.open()
    app = web.Application()
    app.router.add_post(WEBHOOK_PATH, baseline.webhook)
    app.router.add_get("/healthz", baseline.healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", args.port).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(
        f"baseline pipeline on http://127.0.0.1:{args.port}{WEBHOOK_PATH}, polling every {args.interval} s", flush=True
    )
    try:
        await baseline.poll(stop)
    finally:
        await runner.cleanup()
        await baseline.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--channel-url", required=True)
    parser.add_argument("--session", required=True, help="the WAHA session name replies are sent from")
    parser.add_argument("--interval", type=float, default=0.1, help="poll interval, seconds")
    parser.add_argument("--pool", type=int, default=8, help="database connections for the webhook")
    asyncio.run(serve(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
