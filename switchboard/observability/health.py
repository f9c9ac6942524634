"""A tiny HTTP endpoint for /healthz, /readyz and /metrics in worker services.

Workers (dispatcher, runner, notifier, brief) have no web framework; this server answers
Kubernetes probes and Prometheus scrapes without one.

**Answered from a thread of its own, judged by the service's loop.** The probes used to be
served by the service's event loop itself, so a loop busy draining a backlog after a fault
(the chaos test saw it) answered late, past the probe's 2 s timeout, and Kubernetes would
restart a pod for working hard — adding another fault. Now a daemon thread serves HTTP, and
what it answers comes from the loop:

- a **heartbeat** task on the service's loop stamps the time every ``beat_s`` and, with it,
  runs the service's readiness check and keeps the answer;
- ``/healthz`` is 200 while the last beat is younger than ``stall_s`` (30 s): a loop that is
  busy still beats, late; a loop that is stuck (blocked in a call, spinning) stops beating,
  and only then does liveness fail;
- ``/readyz`` is the last readiness answer, and 503 when the beat is stale;
- ``/metrics``: prometheus_client's registry is thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from switchboard.observability.logging import get_logger

log = get_logger(__name__)

ReadinessCheck = Callable[[], Awaitable[bool]]

DEFAULT_BEAT_S: Final = 1.0
DEFAULT_STALL_S: Final = 30.0


async def always_ready() -> bool:
    return True


class LoopPulse:
    """What the probe thread knows about the service's loop: when it last beat, and whether the
    service said it was ready then. Written by the loop, read by the thread (plain attributes:
    a float and a bool are replaced atomically)."""

    def __init__(self, stall_s: float) -> None:
        self.stall_s = stall_s
        self.last_beat = time.monotonic()
        self.ready = False

    def alive(self) -> bool:
        return time.monotonic() - self.last_beat < self.stall_s

    async def beat(self, readiness: ReadinessCheck, beat_s: float) -> None:
        """The heartbeat task: runs on the service's loop until cancelled."""
        while True:
            try:
                ready = await readiness()
            except Exception:  # a failing check is "not ready", never a dead heartbeat
                log.warning("readiness check failed", exc_info=True)
                ready = False
            self.ready, self.last_beat = ready, time.monotonic()
            await asyncio.sleep(beat_s)


def _handler(pulse: LoopPulse) -> type[BaseHTTPRequestHandler]:
    class ProbeHandler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, content_type, body = _route(self.path.split("?", 1)[0], pulse)
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return None  # probes every few seconds would drown the service's own logs

    return ProbeHandler


def _route(path: str, pulse: LoopPulse) -> tuple[int, str, bytes]:
    if path == "/healthz":
        if pulse.alive():
            return 200, "application/json", b'{"status":"ok"}'
        return 503, "application/json", b'{"status":"stalled"}'
    if path == "/readyz":
        if pulse.alive() and pulse.ready:
            return 200, "application/json", b'{"status":"ready"}'
        return 503, "application/json", b'{"status":"not_ready"}'
    if path == "/metrics":
        return 200, CONTENT_TYPE_LATEST, generate_latest()
    return 404, "application/json", b'{"error":{"code":"not_found"}}'


class HealthServer:
    """Serves probes and metrics on 127.0.0.1 or 0.0.0.0 from a thread; port 0 picks a free port."""

    def __init__(
        self,
        *,
        host: str = "0.0.0.0",
        port: int = 0,
        readiness: ReadinessCheck = always_ready,
        beat_s: float = DEFAULT_BEAT_S,
        stall_s: float = DEFAULT_STALL_S,
    ) -> None:
        self._host = host
        self._port = port
        self._readiness = readiness
        self._beat_s = beat_s
        self.pulse = LoopPulse(stall_s)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._heartbeat: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("health server not started")
        return int(self._server.server_address[1])

    async def start(self) -> None:
        """Start the heartbeat on the running loop and the HTTP thread."""
        self._heartbeat = asyncio.create_task(self.pulse.beat(self._readiness, self._beat_s), name="health-beat")
        server = ThreadingHTTPServer((self._host, self._port), _handler(self.pulse))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="health-server", daemon=True)
        self._thread.start()
        log.info("health endpoint listening", extra={"port": self.port})

    async def stop(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
            self._heartbeat = None
        if self._server is not None:
            server, self._server = self._server, None
            await asyncio.to_thread(server.shutdown)
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
