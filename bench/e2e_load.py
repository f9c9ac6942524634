"""The end-to-end benchmark's load: signed WAHA deliveries at a fixed rate (open loop), and the replies' arrival.

Open loop: message *i* is sent at ``start + i / rate`` by the wall clock, each in its own
task, whatever happened to the earlier ones; nothing waits for a reply. A pipeline
that falls behind therefore sees its queue grow (and its latencies with it) instead of
slowing the sender down, as real customers would not slow down either. Every body is
built and signed before the clock starts, so the sender's own cost per message is one
HTTP request.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import aiohttp

from bench.e2e_stats import Received, Sent
from scripts.demo.bootstrap import sign

# A plain greeting: the demo model answers it in one step, without a tool call.
TEXT: Final = "Oi, tudo bem? Queria tirar uma dúvida."
# Connections to the webhook: enough that the sender never queues behind its own pool
# unless the server holds this many requests at once (then the wait is the server's).
CONNECTIONS: Final = 256


@dataclass(frozen=True)
class Target:
    """A webhook to send to and the WAHA session and secret it expects."""

    url: str
    session: str
    secret: str


@dataclass(frozen=True)
class Load:
    """What was sent: the accepted messages, the refused ones, how late the sender was at worst."""

    sent: list[Sent]
    errors: int
    max_lag_ms: float


def chat_ids(count: int, phase: int) -> list[str]:
    """``count`` WhatsApp chat ids nobody else uses (``phase`` keeps warm-up and runs apart)."""
    run = random.randrange(1000, 10_000)
    return [f"55{phase}{run}{index:06d}@c.us" for index in range(count)]


def delivery(session: str, chat_id: str, text: str) -> bytes:
    """A WAHA ``message`` delivery as WAHA sends it (one new inbound message)."""
    envelope = {
        "id": f"evt_{uuid.uuid4().hex}",
        "timestamp": int(time.time() * 1000),
        "event": "message",
        "session": session,
        "payload": {
            "id": f"wamid.{uuid.uuid4().hex}",
            "timestamp": time.time(),
            "from": chat_id,
            "fromMe": False,
            "body": text,
        },
    }
    return json.dumps(envelope).encode()


async def _post(
    http: aiohttp.ClientSession, url: str, chat_id: str, body: bytes, headers: dict[str, str]
) -> Sent | None:
    sent_at = time.time()
    try:
        async with http.post(url, data=body, headers=headers) as response:
            await response.read()
            return Sent(chat_id, sent_at) if response.status < 300 else None
    except (aiohttp.ClientError, TimeoutError):
        return None


async def send_open_loop(target: Target, chats: list[str], rate: float, duration_s: float) -> Load:
    """``rate * duration_s`` messages, round-robin over ``chats``, each sent at its own instant."""
    count = max(1, round(rate * duration_s))
    prepared = []
    for index in range(count):
        chat = chats[index % len(chats)]
        body = delivery(target.session, chat, TEXT)
        prepared.append((chat, body, sign(target.secret, body)))
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONNECTIONS), timeout=timeout) as http:
        loop = asyncio.get_running_loop()
        start = loop.time() + 0.05
        tasks: list[asyncio.Task[Sent | None]] = []
        lag = 0.0
        for index, (chat, body, headers) in enumerate(prepared):
            due = start + index / rate
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
            lag = max(lag, loop.time() - due)
            tasks.append(asyncio.create_task(_post(http, target.url, chat, body, headers)))
        results = await asyncio.gather(*tasks)
    sent = [item for item in results if item is not None]
    return Load(sent=sent, errors=len(results) - len(sent), max_lag_ms=lag * 1000.0)


def received_rows(rows: Iterable[dict[str, Any]], chats: set[str]) -> list[Received]:
    """The channel server's delivered replies (``GET /api/received`` rows) to ``chats``."""
    return [
        Received(str(row["chat_id"]), datetime.fromisoformat(str(row["received_at"])).timestamp())
        for row in rows
        if row.get("chat_id") in chats and 200 <= int(row.get("status_returned", 201)) < 300
    ]


async def wait_replies(
    channel_url: str, chats: set[str], expected: int, timeout_s: float, *, every_s: float = 2.0, settle_s: float = 1.0
) -> list[Received]:
    """The replies to ``chats`` once ``expected`` arrived (then ``settle_s`` more, to see doubles) or at the deadline.

    Polled only after the sending ended and every ``every_s``: the list is the whole
    history, and serializing it costs the channel server time it would otherwise spend
    receiving (and timestamping) replies.
    """
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession(base_url=channel_url, timeout=aiohttp.ClientTimeout(total=30)) as http:

        async def fetch() -> list[Received]:
            async with http.get("/api/received") as response:
                response.raise_for_status()
                return received_rows(await response.json(), chats)

        replies = await fetch()
        while len(replies) < expected and time.monotonic() < deadline:
            await asyncio.sleep(every_s)
            replies = await fetch()
        if len(replies) >= expected:
            await asyncio.sleep(settle_s)
            replies = await fetch()
    return replies
