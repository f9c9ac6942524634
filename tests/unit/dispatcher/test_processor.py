"""The batch processor with fakes: commit order, dead letters, the two-pass admission."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

import pytest

from services.dispatcher import policy
from services.dispatcher.limits import BudgetView, Grant
from services.dispatcher.policy import PolicyConfig
from services.dispatcher.processor import BatchProcessor, InEvent
from switchboard.contracts import (
    CatalogRegistry,
    DispatchDecided,
    DispatcherTick,
    DispatchOutcome,
    Record,
    Serde,
    Topics,
    TopicSpec,
    encode_key,
)
from switchboard.contracts.schemas import schemas_dir
from tests.support.registries import FlakyRegistry
from tests.unit.dispatcher.builders import ORG, T0, dispatch, index_of, snapshot

SERDE = Serde(CatalogRegistry(schemas_dir()))


class Log(list[tuple[str, str]]):
    def future(self, kind: str, name: str) -> asyncio.Future[None]:
        self.append(("send", f"{kind}:{name}"))
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def _ack() -> None:
            self.append(("ack", f"{kind}:{name}"))
            future.set_result(None)

        asyncio.get_running_loop().call_later(0.001, _ack)
        return future


class FakeStore:
    changelog_topic = "t.conversations-changelog"

    def __init__(self, log: Log) -> None:
        self.data: dict[bytes, bytes] = {}
        self._log = log

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def set(self, key: bytes, value: bytes | None, partition: int) -> None:
        if value is None:
            self.data.pop(key, None)
        else:
            self.data[key] = value


class FakeEmitter:
    """Encodes like the real producer; each record gets its own acknowledgment future."""

    def __init__(self, log: Log) -> None:
        self.sent: list[tuple[str, Any]] = []
        self._log = log
        self._records: dict[bytes, tuple[str, Any]] = {}

    def encode(self, topic: TopicSpec[Any], record: Any) -> tuple[str, bytes | None, bytes]:
        value = SERDE.encode(topic, record)
        self._records[value] = (topic.name, record)
        return topic.name, encode_key(topic, record), value

    async def send_many(self, items: Any) -> list[asyncio.Future[None]]:
        futures = []
        for name, key, value in items:
            if name == FakeStore.changelog_topic:
                futures.append(self._log.future("state", key.decode()))
                continue
            self.sent.append(self._records[value])
            futures.append(self._log.future("record", name))
        return futures

    def records(self, topic: TopicSpec[Any]) -> list[Any]:
        return [r for name, r in self.sent if name == topic.name]


class FakeAdmission:
    def __init__(self, grant: int | None = None, *, fail: bool = False) -> None:
        self.grant = grant
        self.fail = fail
        self.calls: list[dict[uuid.UUID, int]] = []

    async def admit(self, demand: Mapping[uuid.UUID, int]) -> Mapping[uuid.UUID, Grant]:
        self.calls.append(dict(demand))
        if self.fail:
            raise ConnectionError("database down")
        return {
            org: Grant(n if self.grant is None else min(n, self.grant), T0 + timedelta(seconds=60))
            for org, n in demand.items()
        }


class FakeDeadLetters:
    def __init__(self) -> None:
        self.letters: list[tuple[InEvent, str]] = []

    async def publish(self, event: InEvent, code: str, message: str) -> None:
        self.letters.append((event, code))


class FakeDue:
    def __init__(self) -> None:
        self.due: dict[bytes, datetime | None] = {}

    def update(self, key: bytes, org_id: uuid.UUID, due: datetime | None) -> None:
        self.due[key] = due


def event(record: Record, *, offset: int = 0, key: bytes | None = None, value: bytes | None = None) -> InEvent:
    topic = (
        Topics.DISPATCH_REQUESTED
        if record is None
        else next(
            t
            for t in (
                Topics.DISPATCH_REQUESTED,
                Topics.RUN_STARTED,
                Topics.RUN_HEARTBEATS,
                Topics.RUN_COMPLETED,
                Topics.DISPATCHER_TICKS,
            )
            if isinstance(record, t.record_type)
        )
    )
    return InEvent(
        topic=topic,
        key=key if key is not None else encode_key(topic, record),
        value=value if value is not None else SERDE.encode(topic, record),
        partition=0,
        offset=offset,
    )


def processor(
    *,
    admission: FakeAdmission | None = None,
    config: PolicyConfig | None = None,
    clock: Callable[[], datetime] = lambda: T0,
    serde: Serde = SERDE,
) -> tuple[BatchProcessor, Log, FakeStore, FakeEmitter, FakeDeadLetters, FakeDue]:
    log = Log()
    store, emitter, letters, due = FakeStore(log), FakeEmitter(log), FakeDeadLetters(), FakeDue()
    proc = BatchProcessor(
        store=store,
        emitter=emitter,
        admission=admission or FakeAdmission(),
        dead_letters=letters,
        index=index_of(snapshot(1)),
        budgets=lambda: BudgetView(),
        config=config or PolicyConfig(reply_interval_s=0),
        serde=serde,
        due=due,
        clock=clock,
    )
    return proc, log, store, emitter, letters, due


async def test_state_and_decisions_are_acknowledged_before_any_run_request_leaves() -> None:
    proc, log, store, emitter, _, due = processor()
    conversations = [uuid.uuid4() for _ in range(3)]
    await proc.process([event(dispatch(conversation=c), offset=i) for i, c in enumerate(conversations)])
    assert len(emitter.records(Topics.RUN_REQUESTED)) == 3
    first_run_request = log.index(("send", "record:run_requested"))
    first_wave_acks = [i for i, (what, name) in enumerate(log) if what == "ack" and not name.endswith("run_requested")]
    assert len(first_wave_acks) == 6  # 3 states + 3 decisions
    assert max(first_wave_acks) < first_run_request
    assert set(store.data) == {str(c).encode() for c in conversations}
    assert all(due.due[str(c).encode()] == T0 + timedelta(seconds=120) for c in conversations)


async def test_a_poison_record_is_dead_lettered_and_the_rest_is_processed() -> None:
    proc, _, _, emitter, letters, _ = processor()
    good = dispatch()
    poison = InEvent(
        topic=Topics.DISPATCH_REQUESTED, key=b"junk", value=b"\x00\x00\x00\x00\x01garbage", partition=0, offset=1
    )
    await proc.process([poison, event(good, offset=2)])
    assert [code for _, code in letters.letters] == ["undecodable_body"]
    assert len(emitter.records(Topics.RUN_REQUESTED)) == 1


async def test_a_record_keyed_by_another_conversation_is_dead_lettered() -> None:
    proc, _, store, emitter, letters, _ = processor()
    await proc.process([event(dispatch(), key=str(uuid.uuid4()).encode())])
    assert [code for _, code in letters.letters] == ["key_mismatch"]
    assert emitter.sent == [] and store.data == {}


async def test_an_event_whose_handling_raises_is_dead_lettered_and_its_conversation_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proc, _, _, emitter, letters, _ = processor()
    bad, good = dispatch("boom"), dispatch("ok")
    real_apply = policy.apply

    def flaky(state: Any, record: Record, ctx: Any) -> Any:
        if getattr(record, "event_id", None) == bad.event_id:
            raise RuntimeError("bug")
        return real_apply(state, record, ctx)

    monkeypatch.setattr("services.dispatcher.processor.apply", flaky)
    await proc.process([event(bad, offset=0), event(good, offset=1)])
    assert [code for _, code in letters.letters] == ["handler_failed"]
    (run,) = emitter.records(Topics.RUN_REQUESTED)
    assert good.message is not None and run.messages == (good.message,)


async def test_one_admission_call_per_batch_and_exactly_the_grant_is_used() -> None:
    admission = FakeAdmission(grant=3)
    proc, _, store, emitter, _, _ = processor(admission=admission)
    await proc.process([event(dispatch(conversation=uuid.uuid4()), offset=i) for i in range(5)])
    assert admission.calls == [{ORG: 5}]
    assert len(emitter.records(Topics.RUN_REQUESTED)) == 3
    decisions: list[DispatchDecided] = emitter.records(Topics.DISPATCH_DECISIONS)
    assert sorted(d.outcome for d in decisions) == sorted(
        [DispatchOutcome.DISPATCHED] * 3 + [DispatchOutcome.RATE_LIMITED] * 2
    )
    assert len(store.data) == 5, "the deferred ones wait in their conversation"


async def test_an_unreachable_database_defers_instead_of_dispatching_past_the_limit() -> None:
    proc, _, _, emitter, _, due = processor(admission=FakeAdmission(fail=True))
    d = dispatch()
    await proc.process([event(d)])
    assert emitter.records(Topics.RUN_REQUESTED) == []
    (decision,) = emitter.records(Topics.DISPATCH_DECISIONS)
    assert decision.outcome is DispatchOutcome.RATE_LIMITED
    assert due.due[str(d.conversation_id).encode()] == T0 + timedelta(seconds=1)


async def test_a_batch_of_replays_writes_and_sends_nothing() -> None:
    proc, log, _, emitter, _, _ = processor()
    d = dispatch()
    await proc.process([event(d)])
    await proc.drain()
    sent, entries = len(emitter.sent), len(log)
    proc._clock = lambda: T0 + timedelta(seconds=3)  # later: still nothing to write
    await proc.process([event(d, offset=5)])
    assert len(emitter.sent) == sent and len(log) == entries


async def test_a_worker_reading_old_records_lets_a_lapsed_lease_wait_one_more_lease() -> None:
    """docs/chaos.md finding 1: evidence may sit unread behind an old backlog; do not recover yet."""
    now = [T0]
    config = PolicyConfig(lease_s=30, start_lease_s=30, reply_interval_s=0)
    proc, _, _, emitter, _, due = processor(config=config, clock=lambda: now[0])
    first = dispatch()
    key = str(first.conversation_id).encode()
    await proc.process([event(first)])
    assert due.due[key] == T0 + timedelta(seconds=30)
    tick = DispatcherTick(org_id=ORG, conversation_id=first.conversation_id, due_at=T0, worker_id="t")

    def produced(record: Record, at: datetime, offset: int) -> InEvent:
        return dataclasses.replace(event(record, offset=offset), timestamp_ms=int(at.timestamp() * 1000))

    now[0] = T0 + timedelta(seconds=40)  # the tick comes with a record produced 100 s ago
    old = dispatch(conversation=uuid.uuid4())
    await proc.process([produced(old, T0 - timedelta(seconds=60), 1), produced(tick, now[0], 2)])
    assert len(emitter.records(Topics.RUN_REQUESTED)) == 2, "no recovery while catching up"
    assert due.due[key] == T0 + timedelta(seconds=70)
    now[0] = T0 + timedelta(seconds=71)  # caught up (fresh input) and the wait is over
    await proc.process([produced(tick, now[0], 3)])
    recovered = emitter.records(Topics.RUN_REQUESTED)[-1]
    assert len(emitter.records(Topics.RUN_REQUESTED)) == 3 and recovered.attempt == 2


async def test_a_request_read_while_the_schema_registry_is_down_waits_for_it_and_is_dispatched() -> None:
    """``registry_unavailable`` is the one decode error that says nothing of the record: it is
    retried until the registry answers. Dead-lettered, the customer's message was never answered."""
    registry = FlakyRegistry(failures=3)
    proc, _, _, emitter, letters, _ = processor(serde=Serde(registry))  # nothing cached yet
    await proc.process([event(dispatch())])
    assert letters.letters == []
    assert registry.lookups == 4
    assert len(emitter.records(Topics.RUN_REQUESTED)) == 1
