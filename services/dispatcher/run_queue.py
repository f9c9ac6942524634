"""Whether a run request still waits in the runners' input (docs/chaos.md, finding 2).

A dispatched run that no runner acknowledged within its start lease is either lost (a
runner took it and died before its first heartbeat, or the request never left) or merely
queued behind a runner group that lags. Re-dispatching a queued run only adds a second
request to the same backlog; under a lag longer than the start lease that turned every
queued run into a recovery, and each recovery into one more queued request.

This module tells the two apart. The worker remembers where each run request it sent
landed (partition and offset, from the broker's acknowledgment: :meth:`RunQueue.sent`), and
every ``refresh_s`` it reads the runner group's committed offsets on the run-request topic
(:meth:`RunQueue.run`). The runner commits a record's offset only after accepting the run
(and it heartbeats a run from acceptance), so a request at or past the group's committed
offset has not been taken by any runner: its lease waits (``policy.on_tick``).

Unknown stays unknown, and then the start lease decides as before: no position (the request
was sent by another worker incarnation, or is not acknowledged yet), no committed offset on
that partition (the group never committed there, or ``DISPATCHER_RUNNER_GROUP`` names
another group), or a snapshot older than three refreshes (the broker did not answer).
Positions are dropped when the run shows a sign of life or ends (:meth:`RunQueue.forget`),
so what is kept is about the backlog itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping

from aiokafka.admin import AIOKafkaAdminClient
from prometheus_client import Counter, Gauge

from switchboard.kafka.producer import Placement
from switchboard.observability.logging import get_logger
from switchboard.settings import KafkaSettings

log = get_logger(__name__)

QUEUED_WAITS = Counter(
    "switchboard_dispatcher_queued_lease_waits_total",
    "Lapsed start leases whose run request still waited in the runners' input (held, unless past max_queued_s)",
)
OFFSET_READ_FAILURES = Counter(
    "switchboard_dispatcher_runner_offsets_read_failures_total", "Reads of the runner group's offsets that failed"
)
TRACKED = Gauge("switchboard_dispatcher_run_requests_tracked", "Run requests sent and not yet acknowledged by a runner")
SNAPSHOT_AGE = Gauge(
    "switchboard_dispatcher_runner_offsets_age_seconds", "Age of the runner group's committed offsets last read"
)

# Fetches the runner group's committed offsets on the run-request topic: {partition: next offset}.
OffsetFetch = Callable[[], Awaitable[Mapping[int, int]]]


class RunQueue:
    """See the module docstring. One per worker process; everything runs on its event loop."""

    def __init__(
        self,
        refresh_s: float,
        *,
        horizon_s: float = 3_600.0,
        capacity: int = 200_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._refresh_s = refresh_s
        # A position older than this can no longer hold a lease (``max_queued_s`` past the dispatch,
        # plus the start lease): dropped, as are positions of runs that moved to another worker.
        self._horizon_s = horizon_s
        self._capacity = capacity
        self._clock = clock
        # run id -> (partition, offset, when it was placed), oldest first.
        self._positions: OrderedDict[uuid.UUID, tuple[int, int, float]] = OrderedDict()
        self._committed: dict[int, int] = {}
        self._observed_at: float | None = None

    # --------------------------------------------------------------------------- positions

    def sent(self, run_id: uuid.UUID, placement: Placement) -> None:
        """A run request left for the broker: remember where it lands once acknowledged."""
        if placement.batch.done():
            self._place(run_id, placement)
        else:
            placement.batch.add_done_callback(lambda _: self._place(run_id, placement))

    def _place(self, run_id: uuid.UUID, placement: Placement) -> None:
        position = placement.position()
        if position is None:
            return  # not written: the processor's next batch fails on it (``_settle_outputs``)
        now = self._clock()
        self._positions[run_id] = (*position, now)
        self._positions.move_to_end(run_id)
        self._prune(now)

    def _prune(self, now: float) -> None:
        """Drop positions past the horizon (oldest first) and beyond the capacity."""
        positions = self._positions
        while positions and (
            len(positions) > self._capacity or now - next(iter(positions.values()))[2] > self._horizon_s
        ):
            positions.popitem(last=False)
        TRACKED.set(len(positions))

    def forget(self, run_id: uuid.UUID) -> None:
        """The run started, heartbeated or ended: it is no longer waiting anywhere."""
        if self._positions.pop(run_id, None) is not None:
            TRACKED.set(len(self._positions))

    # --------------------------------------------------------------------------- the runners' progress

    def observe(self, committed: Mapping[int, int]) -> None:
        """The runner group's committed offsets, just read."""
        self._committed = dict(committed)
        self._observed_at = self._clock()
        SNAPSHOT_AGE.set(0)

    def still_queued(self, run_id: uuid.UUID) -> bool | None:
        """True: no runner took the request yet; False: one did; None: unknown (see the docstring)."""
        position = self._positions.get(run_id)
        if position is None or self._observed_at is None:
            return None
        age = self._clock() - self._observed_at
        SNAPSHOT_AGE.set(age)
        if age > 3 * self._refresh_s:
            return None
        partition, offset, _ = position
        committed = self._committed.get(partition)
        if committed is None:
            return None
        queued = committed <= offset
        if queued:
            QUEUED_WAITS.inc()
        return queued

    async def run(self, stop: asyncio.Event, fetch: OffsetFetch) -> None:
        """Read the runner group's committed offsets every ``refresh_s`` until ``stop``."""
        failures = 0
        while not stop.is_set():
            try:
                async with asyncio.timeout(max(self._refresh_s, 2.0)):
                    self.observe(await fetch())
                failures = 0
            except Exception as exc:  # broker away: the snapshot ages, answers turn unknown
                failures += 1
                OFFSET_READ_FAILURES.inc()
                level = logging.WARNING if failures % 12 == 1 else logging.DEBUG  # the first, then every 12th
                log.log(level, "runner offsets not read", extra={"error": type(exc).__name__, "failures": failures})
            now = self._clock()
            if self._observed_at is not None:
                SNAPSHOT_AGE.set(now - self._observed_at)
            self._prune(now)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self._refresh_s)


class CommittedOffsets:
    """:data:`OffsetFetch` over one admin client: a group's committed offsets on one topic."""

    def __init__(self, kafka: KafkaSettings, group_id: str, topic: str) -> None:
        self._kafka = kafka
        self._group_id = group_id
        self._topic = topic
        self._admin: AIOKafkaAdminClient | None = None

    async def __call__(self) -> Mapping[int, int]:
        if self._admin is None:
            admin = AIOKafkaAdminClient(
                **self._kafka.client_options(), client_id=f"{self._kafka.client_id}-dispatcher-runner-offsets"
            )
            try:
                await admin.start()
            except BaseException:
                await admin.close()
                raise
            self._admin = admin
        try:
            offsets = await self._admin.list_consumer_group_offsets(self._group_id)
        except Exception:
            await self.close()  # a fresh client next time (the broker may have restarted)
            raise
        return {
            tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == self._topic and meta.offset >= 0
        }

    async def close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            with contextlib.suppress(Exception):
                await admin.close()
