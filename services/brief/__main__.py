"""Entry point: ``python -m services.brief`` or ``switchboard brief``."""

import asyncio

from services.brief.service import run
from services.brief.settings import BriefSettings
from switchboard.lifecycle import run_service


def main() -> None:
    settings = BriefSettings()

    async def _main(stop: asyncio.Event) -> None:
        await run(stop, settings)

    run_service("brief", _main, settings)


if __name__ == "__main__":
    main()
