"""Run a service's main coroutine until SIGTERM/SIGINT, then stop it cleanly.

Every service entry point goes through :func:`run_service`, so all of them
log the same way, expose health and metrics the same way, and treat SIGTERM
(what Kubernetes sends before killing a pod) as "finish what you hold, then exit 0".
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from switchboard.observability.health import HealthServer, ReadinessCheck, always_ready
from switchboard.observability.logging import configure_logging, get_logger
from switchboard.observability.metrics import SERVICE_UP
from switchboard.settings import ServiceSettings

log = get_logger(__name__)

ServiceMain = Callable[[asyncio.Event], Awaitable[None]]


class EssentialTaskEnded(RuntimeError):
    """A task the service cannot work without (its consumer) ended before the stop: the process
    exits non-zero, so its orchestrator restarts it."""


async def until_stopped(stop: asyncio.Event, *essential: asyncio.Task[Any]) -> None:
    """Wait for the stop signal — or for an essential task ending first. A consumer task that died
    of an unexpected error left a process whose health endpoint answered "alive" while it consumed
    nothing (its partitions went to the next replica, which could die the same way): then ``stop``
    is set, so the service's own shutdown runs, and :class:`EssentialTaskEnded` is raised."""
    stopped = asyncio.create_task(stop.wait(), name="stop-signal")
    try:
        done, _ = await asyncio.wait({stopped, *essential}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if stopped in done or stop.is_set():
        return
    ended = next(iter(done))
    error = None if ended.cancelled() else ended.exception()
    log.critical(
        "an essential task ended before the stop; exiting",
        extra={"task": ended.get_name(), "error_type": type(error).__name__ if error else None},
        exc_info=error,
    )
    stop.set()
    raise EssentialTaskEnded(ended.get_name())


async def _serve(
    name: str, main: ServiceMain, settings: ServiceSettings, readiness: ReadinessCheck | None, serve_health: bool
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    health = HealthServer(port=settings.health_port, readiness=readiness or always_ready)
    if serve_health:
        await health.start()
    SERVICE_UP.labels(service=name).set(1)
    log.info("service started", extra={"service_name": name, "health_port": health.port if serve_health else None})
    try:
        await main(stop)
    finally:
        SERVICE_UP.labels(service=name).set(0)
        if serve_health:
            await health.stop()
        log.info("service stopped", extra={"service_name": name})


def run_service(
    name: str,
    main: ServiceMain,
    settings: ServiceSettings,
    *,
    readiness: ReadinessCheck | None = None,
    serve_health: bool = True,
) -> None:
    """Configure logging, serve health/metrics, run ``main(stop_event)`` until a signal arrives.

    ``main`` must return soon after ``stop_event`` is set: that is the graceful shutdown.
    ``serve_health=False`` is for services that answer the probes themselves (the API).
    """
    configure_logging(name, level=settings.runtime.log_level, json_logs=settings.runtime.log_json)
    if settings.runtime.uvloop:
        _use_uvloop(name)
    asyncio.run(_serve(name, main, settings, readiness, serve_health))


def _use_uvloop(name: str) -> None:
    """uvloop's event loop for every service (``SWITCHBOARD_UVLOOP``, default on): the services are
    bound by per-event Python overhead, and asyncio's own loop — every socket wait registers a reader
    through pure-Python bookkeeping — was a sixth of it in the dispatcher and a twentieth of the
    runner (docs/benchmarks.md). Falls back to asyncio's loop when uvloop is not installed."""
    try:
        import uvloop
    except ImportError:
        log.warning("uvloop is not installed; using the asyncio event loop", extra={"service_name": name})
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
