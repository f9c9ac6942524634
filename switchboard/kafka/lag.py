"""``switchboard_consumer_lag``: records behind the end of each partition this member owns.

Reported after every handled batch (``report``, from the fetch's high watermark: no round trip) and
refreshed every ``refresh_s`` for every assigned partition (``maybe_refresh``: one ListOffsets
request), because a batch report alone froze the gauge exactly when it matters — a consumer paused
by back-pressure fetches nothing, so its lag stayed at the last small value while the partition's
end ran away, and a partition with no traffic since the start had no series at all — and refreshed
while a record's retry waits (``RecordConsumer._sleep_or_stop``), when a partition is held up and
alerts need it most (2026-12-05). When a rebalance ends, a partition that went to another member has
its series removed (``assigned``), or it would show its last value forever from a member that no
longer reads it; the ones kept are not dropped in between (eager rebalances revoke everything
first).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition

from switchboard.observability.logging import get_logger
from switchboard.observability.metrics import CONSUMER_LAG

log = get_logger(__name__)

# How often every consumer refreshes the lag of all its partitions (one ListOffsets request).
LAG_REFRESH_S = 10.0
# The longest a refresh may take before it is abandoned for this turn (the loop must go on).
REFRESH_TIMEOUT_S = 2.0


class LagGauge:
    """One consumer's share of the gauge (the series labelled with its service)."""

    def __init__(self, service: str, refresh_s: float) -> None:
        self._service = service
        self._refresh_s = refresh_s
        self._next_refresh = 0.0
        self._reported: set[TopicPartition] = set()
        self._task: asyncio.Task[None] | None = None

    def report(self, consumer: AIOKafkaConsumer, tp: TopicPartition, next_offset: int | None) -> None:
        """After a batch: its next offset against the high watermark the fetch brought (not for a
        partition a rebalance took away meanwhile: its series would outlive it)."""
        if tp not in consumer.assignment():
            return
        highwater = consumer.highwater(tp)
        if highwater is not None and next_offset is not None:
            self._set(tp, highwater - next_offset)

    def maybe_refresh(self, consumer: AIOKafkaConsumer) -> None:
        """Every ``refresh_s``: each assigned partition's end offset against this member's position,
        in a task of its own — a slow broker answer must not hold up the consume loop."""
        now = time.monotonic()
        if self._refresh_s <= 0 or now < self._next_refresh or (self._task is not None and not self._task.done()):
            return
        self._next_refresh = now + self._refresh_s
        self._task = asyncio.create_task(self._refresh(consumer), name=f"lag-refresh-{self._service}")

    async def close(self) -> None:
        """At the consumer's stop: a refresh still waiting on the broker is cancelled."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _refresh(self, consumer: AIOKafkaConsumer) -> None:
        assigned = consumer.assignment()
        if not assigned:
            return
        try:
            async with asyncio.timeout(REFRESH_TIMEOUT_S):
                ends = await consumer.end_offsets(list(assigned))
                for tp, end in ends.items():
                    if tp in consumer.assignment():  # not moved meanwhile
                        self._set(tp, end - await consumer.position(tp))
        except Exception as exc:  # a broker away or a rebalance mid-way: the next refresh tries again
            log.debug("consumer lag not refreshed", extra={"service": self._service, "error": type(exc).__name__})

    def assigned(self, assignment: Iterable[TopicPartition]) -> None:
        """A rebalance ended with ``assignment``: the series of partitions outside it go (their new
        owner reports them), the kept ones stay (no dip in the autoscaling signal), and the next
        turn refreshes them all."""
        self.forget(self._reported - set(assignment))
        self._next_refresh = 0.0

    def forget(self, revoked: Iterable[TopicPartition]) -> None:
        """These partitions are no longer ours: their series go (another member reports them)."""
        for tp in revoked:
            if tp in self._reported:
                self._reported.discard(tp)
                with contextlib.suppress(KeyError):  # removed already (another consumer of the service)
                    CONSUMER_LAG.remove(self._service, tp.topic, str(tp.partition))

    def forget_all(self) -> None:
        self.forget(list(self._reported))

    def _set(self, tp: TopicPartition, lag: int) -> None:
        CONSUMER_LAG.labels(self._service, tp.topic, str(tp.partition)).set(max(0, lag))
        self._reported.add(tp)
