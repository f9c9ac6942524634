"""Entry point: ``python -m services.notifier`` or ``switchboard notifier``."""

import asyncio

from services.notifier.service import run
from services.notifier.settings import NotifierSettings
from switchboard.lifecycle import run_service


def main() -> None:
    settings = NotifierSettings()

    async def _main(stop: asyncio.Event) -> None:
        await run(stop, settings)

    run_service("notifier", _main, settings)


if __name__ == "__main__":
    main()
