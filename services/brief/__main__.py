"""Entry point: ``python -m services.brief`` or ``switchboard brief``."""

import asyncio

from switchboard.lifecycle import run_service

from services.brief.service import run
from services.brief.settings import BriefSettings


def main() -> None:
    settings = BriefSettings()

    async def _main(stop: asyncio.Event) -> None:
        await run(stop, settings)

    run_service("brief", _main, settings)


if __name__ == "__main__":
    main()
