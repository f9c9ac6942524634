"""Entry point: ``python -m services.dispatcher`` or ``switchboard dispatcher``."""

import asyncio
import gc

from services.dispatcher.bootstrap import Dispatcher
from services.dispatcher.settings import DispatcherSettings
from switchboard.lifecycle import run_service
from switchboard.observability.logging import get_logger

log = get_logger(__name__)


def _tune_gc() -> None:
    """Fewer, cheaper garbage collections: a batch allocates thousands of short-lived
    objects, and with the default thresholds the collector ran several times per batch and
    its occasional full passes showed up as latency spikes (docs/benchmarks.md)."""
    gc.collect()
    gc.freeze()  # what exists after imports is never garbage: keep it out of every pass
    gc.set_threshold(50_000, 20, 100)


def main() -> None:
    settings = DispatcherSettings()
    _tune_gc()
    running: list[Dispatcher] = []

    async def _main(stop: asyncio.Event) -> None:
        # Built inside the loop: the Kafka clients bind to the running loop.
        dispatcher = Dispatcher(settings)
        running.append(dispatcher)
        await dispatcher.run(stop)

    async def _ready() -> bool:
        return bool(running) and await running[0].ready()

    run_service("dispatcher", _main, settings, readiness=_ready)


if __name__ == "__main__":
    main()
