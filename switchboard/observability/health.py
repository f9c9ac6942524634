"""A tiny HTTP endpoint for /healthz, /readyz and /metrics in worker services.

Workers (dispatcher, runner, notifier, brief) have no web framework; this
asyncio server answers Kubernetes probes and Prometheus scrapes without one.
``/healthz`` says the process loop is alive; ``/readyz`` asks the service's own
readiness check (e.g. "consumer has partitions assigned").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from switchboard.observability.logging import get_logger

log = get_logger(__name__)

ReadinessCheck = Callable[[], Awaitable[bool]]


async def always_ready() -> bool:
    return True


class HealthServer:
    """Serves probes and metrics on 127.0.0.1 or 0.0.0.0; port 0 picks a free port."""

    def __init__(self, *, host: str = "0.0.0.0", port: int = 0, readiness: ReadinessCheck = always_ready) -> None:
        self._host = host
        self._port = port
        self._readiness = readiness
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("health server not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self._host, self._port)
        log.info("health endpoint listening", extra={"port": self.port})

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), timeout=5)
            # Drain headers; we never read a body.
            while (line := await asyncio.wait_for(reader.readline(), timeout=5)) not in (b"\r\n", b"\n", b""):
                del line
            parts = request_line.decode("latin-1").split()
            path = parts[1].split("?", 1)[0] if len(parts) >= 2 else "/"
            status, content_type, body = await self._route(path)
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode("latin-1") + body)
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _route(self, path: str) -> tuple[str, str, bytes]:
        if path == "/healthz":
            return "200 OK", "application/json", b'{"status":"ok"}'
        if path == "/readyz":
            ready = await self._readiness()
            return (
                ("200 OK", "application/json", b'{"status":"ready"}')
                if ready
                else ("503 Service Unavailable", "application/json", b'{"status":"not_ready"}')
            )
        if path == "/metrics":
            return "200 OK", CONTENT_TYPE_LATEST, generate_latest()
        return "404 Not Found", "application/json", b'{"error":{"code":"not_found"}}'
