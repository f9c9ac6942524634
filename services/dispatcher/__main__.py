"""Entry point: ``python -m services.dispatcher`` or ``switchboard dispatcher``."""

import asyncio

from services.dispatcher.bootstrap import Dispatcher
from services.dispatcher.settings import DispatcherSettings
from switchboard.lifecycle import run_service


def main() -> None:
    settings = DispatcherSettings()
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
