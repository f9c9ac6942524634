"""RunQueue: where each run request landed against the runner group's committed offsets."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka.structs import RecordMetadata, TopicPartition

from services.dispatcher.run_queue import RunQueue
from switchboard.kafka.producer import Placement

TOPIC = "run_requested"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def acked(partition: int, base_offset: int) -> asyncio.Future[RecordMetadata]:
    future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
    future.set_result(RecordMetadata(TOPIC, partition, TopicPartition(TOPIC, partition), base_offset, -1, 0, 0))
    return future


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def queue(clock: Clock) -> RunQueue:
    return RunQueue(refresh_s=5.0, clock=clock)


async def test_a_request_at_or_past_the_committed_offset_is_queued_one_before_it_was_taken(queue: RunQueue) -> None:
    batch = acked(partition=2, base_offset=40)
    first, second, third = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    for index, run in enumerate((first, second, third)):
        queue.sent(run, Placement(batch, index))  # offsets 40, 41, 42
    queue.observe({2: 41})  # the group's next offset: 40 was taken, 41 is the next to read
    assert [queue.still_queued(run) for run in (first, second, third)] == [False, True, True]


async def test_a_position_is_known_only_once_the_broker_acknowledged_it(queue: RunQueue) -> None:
    pending: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
    run = uuid.uuid4()
    queue.sent(run, Placement(pending, 0))
    queue.observe({0: 0})
    assert queue.still_queued(run) is None
    pending.set_result(RecordMetadata(TOPIC, 0, TopicPartition(TOPIC, 0), 7, -1, 0, 0))
    await asyncio.sleep(0)  # the done callback runs on the loop
    assert queue.still_queued(run) is True


async def test_a_failed_send_leaves_no_position(queue: RunQueue) -> None:
    failed: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
    run = uuid.uuid4()
    queue.sent(run, Placement(failed, 0))
    failed.set_exception(RuntimeError("broker away"))
    await asyncio.sleep(0)
    queue.observe({0: 0})
    assert queue.still_queued(run) is None
    failed.exception()  # retrieved: no "never retrieved" warning


@pytest.mark.parametrize(
    ("committed", "age_s", "expected"),
    [
        ({3: 10}, 0.0, True),
        ({3: 10}, 15.0, True),  # three refreshes old: still trusted
        ({3: 10}, 15.1, None),  # older: the broker did not answer, unknown
        ({1: 500}, 0.0, None),  # the group never committed on the request's partition
        ({}, 0.0, None),  # no such group (another DISPATCHER_RUNNER_GROUP)
        ({3: 11}, 0.0, False),
    ],
)
async def test_unknown_stays_unknown(
    queue: RunQueue, clock: Clock, committed: dict[int, int], age_s: float, expected: bool | None
) -> None:
    run = uuid.uuid4()
    queue.sent(run, Placement(acked(partition=3, base_offset=10), 0))
    queue.observe(committed)
    clock.now += age_s
    assert queue.still_queued(run) is expected


async def test_without_a_snapshot_or_after_a_sign_of_life_nothing_is_known(queue: RunQueue) -> None:
    run = uuid.uuid4()
    queue.sent(run, Placement(acked(partition=0, base_offset=3), 0))
    assert queue.still_queued(run) is None  # offsets never read
    queue.observe({0: 0})
    assert queue.still_queued(run) is True
    queue.forget(run)  # run_started, a heartbeat or its completion came
    assert queue.still_queued(run) is None


async def test_positions_beyond_the_capacity_drop_the_oldest(clock: Clock) -> None:
    queue = RunQueue(refresh_s=5.0, capacity=2, clock=clock)
    runs = [uuid.uuid4() for _ in range(3)]
    batch = acked(partition=0, base_offset=0)
    for index, run in enumerate(runs):
        queue.sent(run, Placement(batch, index))
    queue.observe({0: 0})
    assert [queue.still_queued(run) for run in runs] == [None, True, True]


async def test_the_refresh_loop_keeps_going_when_the_broker_does_not_answer(clock: Clock) -> None:
    calls = 0
    stop = asyncio.Event()

    async def fetch() -> dict[int, int]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("broker away")
        stop.set()
        return {0: 5}

    fast = RunQueue(refresh_s=0.01, clock=clock)
    await asyncio.wait_for(fast.run(stop, fetch), timeout=5)
    run = uuid.uuid4()
    fast.sent(run, Placement(acked(partition=0, base_offset=5), 0))
    assert calls == 2 and fast.still_queued(run) is True


async def test_positions_past_the_horizon_are_dropped(clock: Clock) -> None:
    """A position older than max_queued_s plus the start lease can hold no lease any more (and the
    run may have moved to another worker, whose events this one never reads): it goes."""
    queue = RunQueue(refresh_s=5.0, horizon_s=100.0, clock=clock)
    old, new = uuid.uuid4(), uuid.uuid4()
    queue.sent(old, Placement(acked(partition=0, base_offset=1), 0))
    clock.now += 101
    queue.sent(new, Placement(acked(partition=0, base_offset=2), 0))
    queue.observe({0: 0})
    assert [queue.still_queued(old), queue.still_queued(new)] == [None, True]
