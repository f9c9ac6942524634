"""Decoding a record while the schema registry may be down: wait for it, never skip or dead-letter.

``registry_unavailable`` is the one decode error that says nothing of the record (the HTTP schema
registry did not answer, or refused our credentials): the record is fine, and a reader that
skipped it (the dispatcher's published-agents feed, the runner's steering) or dead-lettered it
(the dispatcher) lost an agent's version, a steered message or a customer's request. The shared
consumer (``consumer.py``) has the same rule in its own retry loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar

from switchboard.contracts import ContractError, Record, Serde, TopicSpec
from switchboard.observability.logging import get_logger

log = get_logger(__name__)

R = TypeVar("R", bound=Record)

FIRST_WAIT_S: Final = 0.05
MAX_WAIT_S: Final = 10.0


async def decode_waiting(
    serde: Serde,
    topic: TopicSpec[R],
    value: bytes | None,
    where: Mapping[str, Any],
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> R:
    """The record in ``value``; while the registry is unavailable, wait (doubling from 50 ms to
    10 s) and try again. Raises the other :class:`ContractError` codes: the record is bad."""
    attempt = 0
    while True:
        try:
            return await serde.decode_async(topic, value)
        except ContractError as exc:
            if not exc.retryable:
                raise
            attempt += 1
            log.warning("schema registry unavailable", extra={**where, "attempt": attempt, "error_code": str(exc.code)})
            await sleep(min(FIRST_WAIT_S * 2 ** min(attempt - 1, 8), MAX_WAIT_S))
