"""Issue 4 acceptance: real ``switchboard dispatcher`` processes on the real broker and database.

Each test has its own topic prefix (so its own faust app id, consumer groups and changelog),
a stand-in runner, and an observer of everything the dispatcher produced.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from sqlalchemy import text

from switchboard.contracts import (
    ConcurrencyPolicy,
    DispatchOutcome,
    ErrorFamily,
    PublishedChange,
    RunCompleted,
    RunRequested,
    RunStatus,
    SteeringKind,
    Topics,
    WakeReason,
)
from switchboard.db.session import tenant_transaction
from switchboard.kafka.producer import RecordProducer
from switchboard.settings import KafkaSettings
from tests.integration.db.conftest import MigratedDatabase
from tests.support.stack import StackEndpoints

from .harness import (
    Behavior,
    Observer,
    StandInRunner,
    WorkerProcess,
    agent_snapshot,
    assert_no_overlap,
    dispatch_record,
    publish_record,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SESSION = uuid.UUID("0d15ea5e-0000-4000-8000-00000000cafe")


@pytest.fixture
async def producer(topics: KafkaSettings) -> AsyncIterator[RecordProducer]:
    async with RecordProducer(topics, service="test", linger_ms=1) as p:
        yield p


@pytest.fixture
async def worker_factory(
    topics: KafkaSettings, database_url: str, tmp_path: Path
) -> AsyncIterator[Callable[..., Awaitable[WorkerProcess]]]:
    """Start a dispatcher worker (env overrides as keywords); every one is stopped at the end."""
    workers: list[WorkerProcess] = []

    async def start(**env: str) -> WorkerProcess:
        worker = WorkerProcess(topics, database_url, tmp_path, **env).start()
        workers.append(worker)
        await worker.wait_ready()
        return worker

    yield start
    for worker in workers:
        code = worker.stop()
        assert code in (0, -9), f"worker exited {code}:\n{worker.logs()[-3000:]}"


def answered_by(requests: list[RunRequested]) -> dict[uuid.UUID, set[uuid.UUID]]:
    """message id -> the runs whose request carries it."""
    runs: dict[uuid.UUID, set[uuid.UUID]] = defaultdict(set)
    for request in requests:
        for message in request.messages:
            runs[message.message_id].add(request.run_id)
    return runs


# --------------------------------------------------------------------------- burst: 200 x 5


async def test_bursts_of_200_conversations_never_overlap_and_every_message_is_answered(
    topics: KafkaSettings,
    producer: RecordProducer,
    worker_factory: Callable[..., Awaitable[WorkerProcess]],
    make_org: Callable[..., uuid.UUID],
    dispatcher_db: MigratedDatabase,
) -> None:
    org = make_org()
    agent = agent_snapshot(org, SESSION, policy=ConcurrencyPolicy.ENQUEUE)
    await producer.send(Topics.PUBLISHED, publish_record(org, agent))
    worker = await worker_factory()
    conversations = [uuid.uuid4() for _ in range(200)]
    sent: dict[uuid.UUID, list] = defaultdict(list)
    async with Observer(topics) as observer, StandInRunner(topics) as runner:
        for burst in range(5):
            futures = []
            for conversation in conversations:
                record = dispatch_record(org, conversation, SESSION, f"mensagem {burst}")
                sent[conversation].append(record)
                futures.append(await producer.enqueue(Topics.DISPATCH_REQUESTED, record))
            await asyncio.gather(*futures)
            await asyncio.sleep(random.uniform(0.02, 0.1))
        all_messages = {r.message.message_id for records in sent.values() for r in records}

        def done() -> bool:
            answered = {m for i in runner.intervals if i.ended is not None for m in i.message_ids}
            return answered >= all_messages and all(i.ended is not None for i in runner.intervals)

        await observer.wait_for(done, timeout_s=60, what="every message answered by a completed run")
        await asyncio.sleep(0.5)  # anything extra would show up now

        assert_no_overlap(runner.intervals)
        runs_per_message = answered_by(observer.run_requests)
        assert set(runs_per_message) == all_messages
        assert all(len(runs) == 1 for runs in runs_per_message.values()), "a message in two run requests"
        per_conversation = Counter(r.conversation_id for r in observer.run_requests)
        assert all(per_conversation[c] <= 5 for c in conversations), "enqueue: runs <= messages"
        assert sum(per_conversation.values()) < 1000, "bursts were coalesced"
        assert all(r.attempt == 1 for r in observer.run_requests), "no recovery needed"
        # Its input's lag is exported like every other consumer's, and it is drained.
        source = Topics.DISPATCH_REQUESTED.physical_name(topics)
        lag = [line for line in (await worker.metrics()).splitlines() if line.startswith("switchboard_consumer_lag{")]
        drained = [line for line in lag if f'topic="{source}"' in line and 'service="dispatcher"' in line]
        assert drained and all(line.endswith(" 0.0") for line in drained), lag
        # Every dispatch has a recorded decision, and the sink stored them in PostgreSQL.
        decided = {d.dispatch_event_id for d in observer.decisions}
        assert decided >= {r.event_id for records in sent.values() for r in records}
        deadline = time.monotonic() + 20
        while True:
            with dispatcher_db.owner_session() as session, tenant_transaction(session, org):
                stored = session.execute(
                    text("SELECT count(DISTINCT dispatch_event_id) FROM dispatch_decisions WHERE org_id = :o"),
                    {"o": org},
                ).scalar_one()
            if stored >= 1000 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        assert stored == 1000


# --------------------------------------------------------------------------- selection on the broker


async def test_priority_then_age_and_a_paused_agent_is_never_chosen_again(
    topics: KafkaSettings,
    producer: RecordProducer,
    worker_factory: Callable[..., Awaitable[WorkerProcess]],
    make_org: Callable[..., uuid.UUID],
) -> None:
    org = make_org()
    now = datetime.now(UTC)
    low = agent_snapshot(org, SESSION, priority=1, created_at=now - timedelta(days=9), name="low")
    older = agent_snapshot(org, SESSION, priority=10, created_at=now - timedelta(days=5), name="older")
    newer = agent_snapshot(org, SESSION, priority=10, created_at=now - timedelta(days=1), name="newer")
    for snap in (low, newer, older):
        await producer.send(Topics.PUBLISHED, publish_record(org, snap))
    await worker_factory()
    async with Observer(topics) as observer, StandInRunner(topics):

        async def chosen_for(n: int) -> set[uuid.UUID]:
            before = len(observer.run_requests)
            for _ in range(n):
                await producer.send(Topics.DISPATCH_REQUESTED, dispatch_record(org, uuid.uuid4(), SESSION))
            await observer.wait_for(lambda: len(observer.run_requests) >= before + n, what=f"{n} runs")
            return {r.agent_id for r in observer.run_requests[before:]}

        assert await chosen_for(5) == {older.agent_id}, "priority desc, then created_at asc"
        await producer.send(Topics.PUBLISHED, publish_record(org, older, PublishedChange.PAUSED))
        await asyncio.sleep(1.0)  # the index follows the compacted topic asynchronously
        assert await chosen_for(5) == {newer.agent_id}
        await producer.send(Topics.PUBLISHED, publish_record(org, newer, PublishedChange.ARCHIVED))
        await asyncio.sleep(1.0)
        assert await chosen_for(5) == {low.agent_id}
        assert older.agent_id not in {r.agent_id for r in observer.run_requests[5:]}


async def test_the_owners_run_command_from_the_business_phone_is_dispatched_an_own_reply_is_not(
    topics: KafkaSettings,
    producer: RecordProducer,
    worker_factory: Callable[..., Awaitable[WorkerProcess]],
    make_org: Callable[..., uuid.UUID],
) -> None:
    """``ignore_own`` (on by default) is about what the business typed to its customer; a /goal
    the owner writes from the business phone is addressed to the agent (ingest dispatches it)."""
    org = make_org()
    agent = agent_snapshot(org, SESSION)
    assert agent.trigger.ignore_own
    await producer.send(Topics.PUBLISHED, publish_record(org, agent))
    await worker_factory()
    async with Observer(topics) as observer, StandInRunner(topics):
        own_reply = dispatch_record(org, uuid.uuid4(), SESSION, "Já te respondo!", from_me=True)
        command = dispatch_record(org, uuid.uuid4(), SESSION, "/goal confirm every booking --budget 2", from_me=True)
        for record in (own_reply, command):
            await producer.send(Topics.DISPATCH_REQUESTED, record)
        decided = {own_reply.event_id, command.event_id}
        # Decisions are written before the run requests (docs/dispatcher.md): wait for both.
        await observer.wait_for(
            lambda: decided <= {d.dispatch_event_id for d in observer.decisions} and observer.run_requests != [],
            what="both decisions and the run request",
        )
        await asyncio.sleep(0.3)  # a second run request would show up now
        outcome = {d.dispatch_event_id: d for d in observer.decisions}
        assert outcome[command.event_id].outcome is DispatchOutcome.DISPATCHED
        assert [r.messages for r in observer.run_requests] == [(command.message,)]
        assert outcome[own_reply.event_id].outcome is DispatchOutcome.NO_MATCH
        assert "ignore_own" in outcome[own_reply.event_id].details_json


async def test_wakes_aimed_at_three_agents_in_one_conversation_run_each_agent_once(
    topics: KafkaSettings,
    producer: RecordProducer,
    worker_factory: Callable[..., Awaitable[WorkerProcess]],
    make_org: Callable[..., uuid.UUID],
) -> None:
    """The daily analysis fan-out: one targeted wake per analysis agent, all in the org's one
    internal conversation. Each agent gets its own run, one after the other, never folded into
    another agent's run (with ``interrupt`` none stops the run before it either)."""
    org = make_org()
    agents = [agent_snapshot(org, SESSION, policy=ConcurrencyPolicy.INTERRUPT, name=f"a{n}") for n in range(3)]
    for agent in agents:
        await producer.send(Topics.PUBLISHED, publish_record(org, agent))
    await worker_factory()
    conversation = uuid.uuid4()
    wakes = [
        dispatch_record(org, conversation, SESSION).model_copy(
            update={"message": None, "wake_reason": WakeReason.PIPELINE_STEP, "target_agent_id": agent.agent_id}
        )
        for agent in agents
    ]
    async with Observer(topics) as observer, StandInRunner(topics, behavior=lambda rr: Behavior(delay_s=0.5)) as runner:
        for wake in wakes:
            await producer.send(Topics.DISPATCH_REQUESTED, wake)
        await observer.wait_for(
            lambda: len([i for i in runner.intervals if i.ended is not None]) >= 3, timeout_s=30, what="three runs"
        )
        await asyncio.sleep(0.5)
        assert [r.agent_id for r in observer.run_requests] == [a.agent_id for a in agents]
        assert [r.dispatch_ids for r in observer.run_requests] == [(w.event_id,) for w in wakes]
        assert observer.steering == [], "nobody interrupted a run on another agent's behalf"
        assert_no_overlap(runner.intervals)


async def test_a_worker_on_a_sasl_listener_dispatches_and_never_logs_its_password(
    topics: KafkaSettings,
    producer: RecordProducer,
    worker_factory: Callable[..., Awaitable[WorkerProcess]],
    make_org: Callable[..., uuid.UUID],
    stack: StackEndpoints,
) -> None:
    """faust's consumer and producer, the published feed and our producers all authenticate with
    ``KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT`` (docs/deploy.md); at DEBUG, the password appears in
    none of the worker's output."""
    listener = stack.kafka_sasl
    assert listener is not None, "the local broker has no SASL listener: run `make up`"
    org = make_org()
    await producer.send(Topics.PUBLISHED, publish_record(org, agent_snapshot(org, SESSION)))
    worker = await worker_factory(
        KAFKA_BOOTSTRAP_SERVERS=listener.bootstrap_servers,
        KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT",
        KAFKA_SASL_USERNAME=listener.username,
        KAFKA_SASL_PASSWORD=listener.password,
        SWITCHBOARD_LOG_LEVEL="DEBUG",
    )
    async with Observer(topics) as observer, StandInRunner(topics):
        request = dispatch_record(org, uuid.uuid4(), SESSION)
        await producer.send(Topics.DISPATCH_REQUESTED, request)
        await observer.wait_for(lambda: observer.run_requests != [], what="the run request")
    assert [r.dispatch_ids for r in observer.run_requests] == [(request.event_id,)]
    # Only SASL gets through that port (a plaintext client is refused there), so the run request proves it.
    assert listener.password not in worker.logs()


# --------------------------------------------------------------------------- crash and restart


async def test_sigkill_mid_stream_then_restart_recovers_the_table_and_never_dispatches_twice(
    topics: KafkaSettings,
    producer: RecordProducer,
    worker_factory: Callable[..., Awaitable[WorkerProcess]],
    make_org: Callable[..., uuid.UUID],
) -> None:
    org = make_org()
    await producer.send(Topics.PUBLISHED, publish_record(org, agent_snapshot(org, SESSION)))
    # A kill between a batch's state write and its run requests leaves a run dispatched whose
    # request never left: the restarted worker sends it again (the production start lease, 120 s,
    # would outlast the wait below); runs heartbeat, so the 30 s lease never lapses a live one.
    leases = {"DISPATCHER_LEASE_S": "30"}
    worker = await worker_factory(**leases)
    conversations = [uuid.uuid4() for _ in range(60)]
    sent = []
    slow = lambda rr: Behavior(delay_s=random.uniform(0.2, 1.5))  # noqa: E731 - runs straddle the crash
    async with Observer(topics) as observer, StandInRunner(topics, behavior=slow) as runner:

        async def send_round(label: str) -> None:
            for conversation in conversations:
                record = dispatch_record(org, conversation, SESSION, label)
                sent.append(record)
                await producer.enqueue(Topics.DISPATCH_REQUESTED, record)

        for i in range(3):
            await send_round(f"before {i}")
            await asyncio.sleep(0.3)
        await observer.wait_for(lambda: len(observer.run_requests) >= 60, what="first runs")
        worker.kill()  # mid-stream: runs in flight, messages queued, offsets not all committed
        killed_at = time.monotonic()
        in_flight = [i for i in runner.intervals if i.ended is None or i.ended > killed_at]
        assert in_flight, "the kill should catch runs in flight"
        for i in range(2):
            await send_round(f"while down {i}")
            await asyncio.sleep(0.2)
        restarted = await worker_factory(**leases)
        for i in range(2):
            await send_round(f"after {i}")
            await asyncio.sleep(0.3)
        all_messages = {r.message.message_id for r in sent}

        def done() -> bool:
            answered = {m for i in runner.intervals if i.ended is not None for m in i.message_ids}
            return answered >= all_messages

        await observer.wait_for(done, timeout_s=60, what="every message answered after the restart")
        await asyncio.sleep(1.0)
        runs_per_message = answered_by(observer.run_requests)
        duplicates = {m: runs for m, runs in runs_per_message.items() if len(runs) > 1}
        assert not duplicates, f"{len(duplicates)} messages got a second run_requested"
        assert_no_overlap(runner.intervals)
        # A request may be re-sent (no runner had acknowledged it when the worker died), as itself.
        by_run = {(r.run_id, r.event_id, r.attempt, r.messages) for r in observer.run_requests}
        assert len(by_run) == len({r.run_id for r in observer.run_requests})
        # The busy table came back from the changelog, not from scratch.
        recovered = [line for line in restarted.logs().splitlines() if "conversation table recovered" in line]
        assert recovered and '"conversations": 60' in recovered[0], recovered


# --------------------------------------------------------------------------- recovery


async def test_a_run_that_never_heartbeats_is_recovered_then_failed_as_process_lost(
    topics: KafkaSettings,
    producer: RecordProducer,
    worker_factory: Callable[..., Awaitable[WorkerProcess]],
    make_org: Callable[..., uuid.UUID],
) -> None:
    org = make_org()
    await producer.send(Topics.PUBLISHED, publish_record(org, agent_snapshot(org, SESSION)))
    await worker_factory(DISPATCHER_LEASE_S="1.5", DISPATCHER_MAX_ATTEMPTS="3")
    silent = lambda rr: Behavior(heartbeat=False, complete=False)  # noqa: E731 - starts, then nothing
    conversation = uuid.uuid4()
    request = dispatch_record(org, conversation, SESSION)
    async with Observer(topics) as observer, StandInRunner(topics, behavior=silent):
        await producer.send(Topics.DISPATCH_REQUESTED, request)
        lost = lambda: [c for c in observer.records(Topics.RUN_COMPLETED) if isinstance(c, RunCompleted)]  # noqa: E731
        await observer.wait_for(lambda: bool(lost()), timeout_s=30, what="the processLost completion")
        attempts = sorted(observer.run_requests, key=lambda r: r.attempt)
        assert [r.attempt for r in attempts] == [1, 2, 3]
        assert attempts[0].parent_run_id is None
        assert attempts[1].parent_run_id == attempts[0].run_id and attempts[1].wake_reason is WakeReason.RECOVERY
        assert attempts[2].parent_run_id == attempts[1].run_id
        assert all(r.messages == (request.message,) for r in attempts)
        (closed,) = lost()
        assert (closed.run_id, closed.status, closed.error_family, closed.attempt) == (
            attempts[2].run_id,
            RunStatus.FAILED,
            ErrorFamily.PROCESS_LOST,
            3,
        )
        outcomes = [d.outcome for d in observer.decisions]
        assert outcomes == [
            DispatchOutcome.DISPATCHED,
            DispatchOutcome.RECOVERED,
            DispatchOutcome.RECOVERED,
            DispatchOutcome.LOST,
        ]
        # The conversation is free again: the next message is dispatched at once.
        await producer.send(Topics.DISPATCH_REQUESTED, dispatch_record(org, conversation, SESSION, "de novo?"))
        await observer.wait_for(lambda: len(observer.run_requests) == 4, what="a fresh run")
        assert observer.run_requests[-1].attempt == 1


async def test_a_run_no_runner_took_yet_holds_the_start_lease_not_the_lease(
    topics: KafkaSettings,
    producer: RecordProducer,
    worker_factory: Callable[..., Awaitable[WorkerProcess]],
    make_org: Callable[..., uuid.UUID],
) -> None:
    """docs/chaos.md finding 2: a run queued in a lagging runner is not re-dispatched after one lease."""
    org = make_org()
    await producer.send(Topics.PUBLISHED, publish_record(org, agent_snapshot(org, SESSION)))
    await worker_factory(DISPATCHER_LEASE_S="1.5", DISPATCHER_START_LEASE_S="5", DISPATCHER_MAX_ATTEMPTS="2")
    queued = lambda rr: Behavior(start=False)  # noqa: E731 - never acknowledges: stuck in a backlog
    async with Observer(topics) as observer, StandInRunner(topics, behavior=queued):
        await producer.send(Topics.DISPATCH_REQUESTED, dispatch_record(org, uuid.uuid4(), SESSION))
        await observer.wait_for(lambda: len(observer.run_requests) == 2, timeout_s=30, what="the recovery")
        first, recovery = sorted(observer.run_requests, key=lambda r: r.attempt)
        waited = (recovery.occurred_at - first.occurred_at).total_seconds()
        assert waited >= 5, f"recovered after {waited:.1f} s: the 1.5 s lease was applied, not the start lease"
        assert recovery.parent_run_id == first.run_id


class LaggingRunnerGroup:
    """A runner consumer group that reads nothing: only its committed offsets move, by hand."""

    def __init__(self, kafka: KafkaSettings, name: str) -> None:
        self._kafka = kafka
        self.name = name
        topic = Topics.RUN_REQUESTED.physical_name(kafka)
        self._partitions = [TopicPartition(topic, p) for p in range(Topics.RUN_REQUESTED.partition_count(kafka))]
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=kafka.bootstrap_servers,
            group_id=kafka.consumer_group(name),
            enable_auto_commit=False,
        )

    async def __aenter__(self) -> LaggingRunnerGroup:
        await self._consumer.start()
        self._consumer.assign(self._partitions)  # no subscription: commits without joining, no rebalance
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()

    async def take_everything_sent_so_far(self) -> None:
        """Commit the end of every partition, as a runner that read (and lost) every request would."""
        ends = await self._consumer.end_offsets(self._partitions)
        await self._consumer.commit({tp: end for tp, end in ends.items()})


async def test_a_run_whose_request_still_waits_in_a_lagging_runner_group_is_not_recovered(
    topics: KafkaSettings,
    producer: RecordProducer,
    worker_factory: Callable[..., Awaitable[WorkerProcess]],
    make_org: Callable[..., uuid.UUID],
) -> None:
    """docs/chaos.md finding 2, the part the start lease left open: a runner group lagging more
    than the start lease. While the runners' committed offset is not past a request, its run is
    queued, not lost: no recovery joins the backlog. Once a runner took it and said nothing, the
    lease recovers it as before."""
    org = make_org()
    await producer.send(Topics.PUBLISHED, publish_record(org, agent_snapshot(org, SESSION)))
    async with LaggingRunnerGroup(topics, f"runners-{uuid.uuid4().hex[:6]}") as runners, Observer(topics) as observer:
        await runners.take_everything_sent_so_far()  # the group exists, with an offset on every partition
        worker = await worker_factory(
            DISPATCHER_LEASE_S="1.5",
            DISPATCHER_START_LEASE_S="3",
            DISPATCHER_MAX_ATTEMPTS="2",
            DISPATCHER_RUNNER_GROUP=runners.name,
            DISPATCHER_RUNNER_OFFSETS_REFRESH_S="0.5",
        )
        await producer.send(Topics.DISPATCH_REQUESTED, dispatch_record(org, uuid.uuid4(), SESSION))
        await observer.wait_for(lambda: len(observer.run_requests) == 1, what="the run request")
        await asyncio.sleep(10.0)  # three start leases, six leases
        assert len(observer.run_requests) == 1, "a run still queued in the runners' input was re-dispatched"
        assert [d.outcome for d in observer.decisions] == [DispatchOutcome.DISPATCHED]
        metric = "switchboard_dispatcher_queued_lease_waits_total"
        waits = [line for line in (await worker.metrics()).splitlines() if line.startswith(metric)]
        assert waits and float(waits[0].split()[-1]) >= 2, waits

        await runners.take_everything_sent_so_far()  # a runner took it, then died before its first heartbeat
        taken_at = time.monotonic()
        await observer.wait_for(lambda: len(observer.run_requests) == 2, timeout_s=20, what="the recovery")
        first, recovery = observer.run_requests
        assert (recovery.attempt, recovery.parent_run_id, recovery.wake_reason) == (
            2,
            first.run_id,
            WakeReason.RECOVERY,
        )
        assert time.monotonic() - taken_at < 10
        assert [d.outcome for d in observer.decisions] == [DispatchOutcome.DISPATCHED, DispatchOutcome.RECOVERED]


async def test_a_request_no_runner_acknowledged_is_sent_again_by_the_restarted_worker(
    topics: KafkaSettings,
    producer: RecordProducer,
    worker_factory: Callable[..., Awaitable[WorkerProcess]],
    make_org: Callable[..., uuid.UUID],
) -> None:
    """The worker died between writing the state and sending the request, or the request sits
    unread: either way the worker that takes over sends the same request once, at once — not
    after the two-minute start lease."""
    org = make_org()
    await producer.send(Topics.PUBLISHED, publish_record(org, agent_snapshot(org, SESSION)))
    first_worker = await worker_factory()  # the production start lease: 120 s
    queued = lambda rr: Behavior(start=False)  # noqa: E731 - never acknowledges
    async with Observer(topics) as observer, StandInRunner(topics, behavior=queued):
        await producer.send(Topics.DISPATCH_REQUESTED, dispatch_record(org, uuid.uuid4(), SESSION))
        await observer.wait_for(lambda: len(observer.run_requests) == 1, what="the run request")
        first_worker.kill()
        restarted_at = time.monotonic()
        await worker_factory()
        await observer.wait_for(lambda: len(observer.run_requests) == 2, timeout_s=40, what="the re-sent request")
        waited = time.monotonic() - restarted_at
        await asyncio.sleep(3.0)  # a few ticks more: once
        original, again = observer.run_requests
        assert len(observer.run_requests) == 2
        assert (again.event_id, again.run_id, again.attempt, again.messages) == (
            original.event_id,
            original.run_id,
            1,
            original.messages,
        )
        assert waited < 60, f"re-sent after {waited:.0f} s"


# --------------------------------------------------------------------------- org rate limit


async def test_org_rate_limit_admits_60_now_and_the_other_40_later_none_lost(
    topics: KafkaSettings,
    producer: RecordProducer,
    worker_factory: Callable[..., Awaitable[WorkerProcess]],
    make_org: Callable[..., uuid.UUID],
) -> None:
    window_s = 4
    org = make_org(rate_limit=60)
    await producer.send(Topics.PUBLISHED, publish_record(org, agent_snapshot(org, SESSION)))
    await worker_factory(DISPATCHER_RATE_WINDOW_S=str(window_s))
    async with Observer(topics) as observer, StandInRunner(topics):
        # Windows are aligned on the epoch: start just after a boundary so all 100 land in one.
        await asyncio.sleep(window_s - time.time() % window_s + 0.05)
        window_end = (int(time.time()) // window_s + 1) * window_s
        records = [dispatch_record(org, uuid.uuid4(), SESSION) for _ in range(100)]
        futures = [await producer.enqueue(Topics.DISPATCH_REQUESTED, r) for r in records]
        await asyncio.gather(*futures)
        assert time.time() < window_end - 1, "the burst took longer than a second"
        await observer.wait_for(lambda: len(observer.run_requests) >= 100, timeout_s=3 * window_s, what="all 100 runs")
        first_window = [r for r in observer.run_requests if r.occurred_at.timestamp() < window_end]
        later = [r for r in observer.run_requests if r.occurred_at.timestamp() >= window_end]
        assert (len(first_window), len(later)) == (60, 40)
        assert {m.message_id for r in observer.run_requests for m in r.messages} == {
            r.message.message_id for r in records
        }
        limited = [d for d in observer.decisions if d.outcome is DispatchOutcome.RATE_LIMITED]
        assert len(limited) == 40 and all(d.not_before is not None for d in limited)
        assert '"limit":"org"' in limited[0].details_json


# --------------------------------------------------------------------------- one test per policy


async def _busy_conversation(
    policy: ConcurrencyPolicy,
    topics: KafkaSettings,
    producer: RecordProducer,
    worker_factory: Callable[..., Awaitable[WorkerProcess]],
    make_org: Callable[..., uuid.UUID],
) -> tuple[uuid.UUID, uuid.UUID]:
    org = make_org()
    await producer.send(Topics.PUBLISHED, publish_record(org, agent_snapshot(org, SESSION, policy=policy)))
    await worker_factory()
    return org, uuid.uuid4()


async def test_policy_enqueue_answers_waiting_messages_in_one_follow_up_run(
    topics: KafkaSettings,
    producer: RecordProducer,
    worker_factory: Callable[..., Awaitable[WorkerProcess]],
    make_org: Callable[..., uuid.UUID],
) -> None:
    org, conversation = await _busy_conversation(ConcurrencyPolicy.ENQUEUE, topics, producer, worker_factory, make_org)
    async with Observer(topics) as observer, StandInRunner(topics, behavior=lambda rr: Behavior(delay_s=1.5)):
        first = dispatch_record(org, conversation, SESSION, "um")
        await producer.send(Topics.DISPATCH_REQUESTED, first)
        await observer.wait_for(lambda: len(observer.run_requests) == 1, what="the first run")
        waiting = [dispatch_record(org, conversation, SESSION, t) for t in ("dois", "três")]
        for record in waiting:
            await producer.send(Topics.DISPATCH_REQUESTED, record)
        await observer.wait_for(lambda: len(observer.run_requests) == 2, timeout_s=15, what="the follow-up run")
        follow_up = observer.run_requests[1]
        assert follow_up.messages == tuple(r.message for r in waiting)
        queued = [d for d in observer.decisions if d.outcome is DispatchOutcome.QUEUED]
        assert {d.dispatch_event_id for d in queued} == {r.event_id for r in waiting}


async def test_policy_steer_sends_the_message_to_the_active_run(
    topics: KafkaSettings,
    producer: RecordProducer,
    worker_factory: Callable[..., Awaitable[WorkerProcess]],
    make_org: Callable[..., uuid.UUID],
) -> None:
    org, conversation = await _busy_conversation(ConcurrencyPolicy.STEER, topics, producer, worker_factory, make_org)
    async with Observer(topics) as observer, StandInRunner(topics, behavior=lambda rr: Behavior(delay_s=1.5)) as runner:
        await producer.send(Topics.DISPATCH_REQUESTED, dispatch_record(org, conversation, SESSION, "um"))
        await observer.wait_for(lambda: len(observer.run_requests) == 1, what="the first run")
        second = dispatch_record(org, conversation, SESSION, "e amanhã?")
        await producer.send(Topics.DISPATCH_REQUESTED, second)
        await observer.wait_for(lambda: len(observer.steering) == 1, what="the steering message")
        (steer,) = observer.steering
        assert (steer.kind, steer.run_id, steer.source_message) == (
            SteeringKind.GUIDANCE,
            observer.run_requests[0].run_id,
            second.message,
        )
        await observer.wait_for(lambda: all(i.ended for i in runner.intervals), timeout_s=10, what="the run to end")
        await asyncio.sleep(0.8)
        assert len(observer.run_requests) == 1, "the steered message was answered by the active run"
        assert second.message.message_id in runner.intervals[0].message_ids


async def test_policy_interrupt_stops_the_run_and_answers_everything_in_a_new_one(
    topics: KafkaSettings,
    producer: RecordProducer,
    worker_factory: Callable[..., Awaitable[WorkerProcess]],
    make_org: Callable[..., uuid.UUID],
) -> None:
    org, conversation = await _busy_conversation(
        ConcurrencyPolicy.INTERRUPT, topics, producer, worker_factory, make_org
    )
    async with Observer(topics) as observer, StandInRunner(topics, behavior=lambda rr: Behavior(delay_s=10)) as runner:
        first = dispatch_record(org, conversation, SESSION, "um")
        await producer.send(Topics.DISPATCH_REQUESTED, first)
        await observer.wait_for(lambda: len(observer.run_requests) == 1, what="the first run")
        second = dispatch_record(org, conversation, SESSION, "esquece, outra coisa")
        await producer.send(Topics.DISPATCH_REQUESTED, second)
        await observer.wait_for(lambda: len(observer.run_requests) == 2, timeout_s=8, what="the restarted run")
        (stop,) = observer.steering
        assert (stop.kind, stop.run_id) == (SteeringKind.INTERRUPT, observer.run_requests[0].run_id)
        assert runner.intervals[0].status is RunStatus.ABORTED
        restart = observer.run_requests[1]
        assert restart.messages == (first.message, second.message)
        assert restart.parent_run_id == observer.run_requests[0].run_id
        assert_no_overlap(runner.intervals)


async def test_policy_reject_records_conv_busy(
    topics: KafkaSettings,
    producer: RecordProducer,
    worker_factory: Callable[..., Awaitable[WorkerProcess]],
    make_org: Callable[..., uuid.UUID],
) -> None:
    org, conversation = await _busy_conversation(ConcurrencyPolicy.REJECT, topics, producer, worker_factory, make_org)
    async with Observer(topics) as observer, StandInRunner(topics, behavior=lambda rr: Behavior(delay_s=1.0)) as runner:
        await producer.send(Topics.DISPATCH_REQUESTED, dispatch_record(org, conversation, SESSION, "um"))
        await observer.wait_for(lambda: len(observer.run_requests) == 1, what="the first run")
        second = dispatch_record(org, conversation, SESSION, "dois")
        await producer.send(Topics.DISPATCH_REQUESTED, second)
        await observer.wait_for(
            lambda: any(d.outcome is DispatchOutcome.CONV_BUSY for d in observer.decisions), what="conv_busy"
        )
        (busy,) = [d for d in observer.decisions if d.outcome is DispatchOutcome.CONV_BUSY]
        assert (busy.dispatch_event_id, busy.run_id) == (second.event_id, observer.run_requests[0].run_id)
        await observer.wait_for(lambda: all(i.ended for i in runner.intervals), what="the run to end")
        await asyncio.sleep(0.8)
        assert len(observer.run_requests) == 1


# --------------------------------------------------------------------------- poison


async def test_a_poison_record_is_dead_lettered_and_dispatching_goes_on(
    topics: KafkaSettings,
    producer: RecordProducer,
    worker_factory: Callable[..., Awaitable[WorkerProcess]],
    make_org: Callable[..., uuid.UUID],
) -> None:
    org = make_org()
    await producer.send(Topics.PUBLISHED, publish_record(org, agent_snapshot(org, SESSION)))
    worker = await worker_factory()
    conversation = uuid.uuid4()
    async with Observer(topics) as observer, StandInRunner(topics):
        await producer.send_raw(Topics.DISPATCH_REQUESTED, key=str(conversation).encode(), value=b"\x00garbage!")
        await producer.send_raw(Topics.RUN_COMPLETED, key=str(conversation).encode(), value=b"not avro at all")
        good = dispatch_record(org, conversation, SESSION)
        await producer.send(Topics.DISPATCH_REQUESTED, good)
        await observer.wait_for(lambda: len(observer.run_requests) == 1, what="the good dispatch")
        await observer.wait_for(lambda: len(observer.dead_letters) == 2, what="two dead letters")
        codes = {(d.original_topic, d.error_code) for d in observer.dead_letters}
        assert codes == {
            (Topics.DISPATCH_REQUESTED.physical_name(topics), "unknown_schema_id"),
            (Topics.RUN_COMPLETED.physical_name(topics), "bad_magic_byte"),
        }
        assert all(d.service == "dispatcher" for d in observer.dead_letters)
        assert observer.run_requests[0].messages == (good.message,)
        metrics = await worker.metrics()
        assert "switchboard_dispatch_decisions_total" in metrics and 'outcome="dispatched"' in metrics
