"""The notifier's main loop.

For now it only waits for the stop signal: the foundation proves every service
starts, logs and stops cleanly on SIGTERM; the notifier's own issue fills this in.
"""

import asyncio

from services.notifier.settings import NotifierSettings
from switchboard.observability.logging import get_logger

log = get_logger(__name__)


async def run(stop: asyncio.Event, settings: NotifierSettings) -> None:
    """Run until ``stop`` is set."""
    log.info("notifier waiting for work", extra={"kafka": settings.kafka.bootstrap_servers})
    await stop.wait()
