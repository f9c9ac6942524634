"""A service waits for its stop signal, and fails — to be restarted — when its consumer dies first."""

from __future__ import annotations

import asyncio

import pytest

from switchboard.lifecycle import EssentialTaskEnded, until_stopped


async def test_a_consumer_that_dies_fails_the_service_and_starts_its_shutdown() -> None:
    async def consumer() -> None:
        await asyncio.sleep(0.01)
        raise RuntimeError("the registry answered garbage")

    stop = asyncio.Event()
    task = asyncio.create_task(consumer(), name="run-requested")
    with pytest.raises(EssentialTaskEnded, match="run-requested"):
        await asyncio.wait_for(until_stopped(stop, task), 5)
    assert stop.is_set(), "the service's own shutdown runs"


async def test_the_stop_signal_returns_and_leaves_the_consumer_to_the_shutdown() -> None:
    stop = asyncio.Event()
    consumer = asyncio.create_task(stop.wait(), name="consumer")
    asyncio.get_running_loop().call_later(0.01, stop.set)
    await asyncio.wait_for(until_stopped(stop, consumer), 5)
    await consumer
