"""Entry point: ``python -m services.runner`` or ``switchboard runner``."""

import asyncio

from services.runner.service import run
from services.runner.settings import RunnerSettings
from switchboard.lifecycle import run_service


def main() -> None:
    settings = RunnerSettings()

    async def _main(stop: asyncio.Event) -> None:
        await run(stop, settings)

    run_service("runner", _main, settings)


if __name__ == "__main__":
    main()
