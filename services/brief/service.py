"""The brief's main loop.

For now it only waits for the stop signal: the foundation proves every service
starts, logs and stops cleanly on SIGTERM; the brief's own issue fills this in.
"""

import asyncio

from services.brief.settings import BriefSettings
from switchboard.observability.logging import get_logger

log = get_logger(__name__)


async def run(stop: asyncio.Event, settings: BriefSettings) -> None:
    """Run until ``stop`` is set."""
    log.info("brief waiting for work", extra={"kafka": settings.kafka.bootstrap_servers})
    await stop.wait()
