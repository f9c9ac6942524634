"""Entry point: ``python -m services.dispatcher`` or ``switchboard dispatcher``."""

import asyncio

from services.dispatcher.service import run
from services.dispatcher.settings import DispatcherSettings
from switchboard.lifecycle import run_service


def main() -> None:
    settings = DispatcherSettings()

    async def _main(stop: asyncio.Event) -> None:
        await run(stop, settings)

    run_service("dispatcher", _main, settings)


if __name__ == "__main__":
    main()
