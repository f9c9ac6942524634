"""Decoding while the schema registry is slow or down: off the event loop, waited for, never skipped."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from switchboard.contracts import ContractError, ContractErrorCode, Serde, Topics
from switchboard.kafka.decoding import decode_waiting
from tests.support.registries import FlakyRegistry
from tests.support.samples import realistic_records


def _framed(serde: Serde) -> tuple[Any, bytes]:
    record = next(r for r in realistic_records() if isinstance(r, Topics.STEERING.record_type))
    return record, serde.encode(Topics.STEERING, record)


async def test_a_schema_id_not_seen_before_is_resolved_without_stopping_the_event_loop() -> None:
    serde = Serde(FlakyRegistry(delay_s=0.4))
    record, value = _framed(serde)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.02)

    ticker = asyncio.create_task(tick())
    try:
        assert await serde.decode_async(Topics.STEERING, value) == record
    finally:
        ticker.cancel()
    assert ticks >= 10, "the loop went on while the registry answered (blocked, it ticked once)"
    # Seen now: decoded inline, the registry not asked again.
    assert await serde.decode_async(Topics.STEERING, value) == record


async def test_a_record_read_while_the_registry_is_down_is_waited_for_not_skipped() -> None:
    registry = FlakyRegistry(failures=3)
    serde = Serde(registry)
    record, value = _framed(serde)
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    assert await decode_waiting(serde, Topics.STEERING, value, {"offset": 7}, sleep=sleep) == record
    assert waits == [0.05, 0.1, 0.2] and registry.lookups == 4


async def test_a_bad_record_is_not_waited_for() -> None:
    serde = Serde(FlakyRegistry())
    with pytest.raises(ContractError) as raised:
        await decode_waiting(serde, Topics.STEERING, b"\x00\x00\x00\x00\x01garbage", {"offset": 8})
    assert raised.value.code is not ContractErrorCode.REGISTRY_UNAVAILABLE
