"""One batch of conversation events in, state changes and records out, in a safe order.

The faust agent hands each batch (``stream.take_events``) to :meth:`BatchProcessor.process`:

1. decode every record with its contract; an undecodable record, or one whose key is not
   its conversation id, is dead-lettered and skipped;
2. fold the events of each conversation into its state, in order (``policy.apply``),
   first admitting every run start (``Admission.unlimited``) to learn what each org wants;
3. ask PostgreSQL once per org for that many run starts (``admit_org_runs``); for the
   orgs granted less, fold their conversations again with exactly what was granted;
4. write the new states (the changelog) and the decision records, and wait until the
   broker acknowledged both;
5. only then send run requests, steering and lost-run completions; their
   acknowledgments are awaited at the start of the next batch's step 4, not here, so
   the next batch is not held up by them (a failed send still stops the worker).

A crash before 4 completes emits nothing the replay will not recompute (decision ids are
derived, so the sink stores them once); a crash between 4 and 5 leaves a dispatched run
whose request never left, which its lease recovers as attempt + 1; a crash after 5 replays
events that are already in the state, which change nothing. So no message ever gets a
second ``run_requested``. An event whose handling raises is dead-lettered and the rest of
its conversation's events are applied without it.

No faust import: the store, the producer, the admission and the dead letters are ports,
so the whole path is tested with fakes.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from services.dispatcher import metrics, recovery
from services.dispatcher.agents import AgentIndex
from services.dispatcher.limits import Admission, BudgetView, Grant
from services.dispatcher.metrics import NoMatchWatch
from services.dispatcher.policy import Context, PolicyConfig, apply, conversation_of, queue_unknown
from services.dispatcher.run_queue import RunQueue
from services.dispatcher.state import ConversationState, Emit, Transition
from switchboard.contracts import (
    ContractError,
    DispatchDecided,
    DispatchOutcome,
    Record,
    RunCompleted,
    RunHeartbeat,
    RunRequested,
    RunStarted,
    Serde,
    Topics,
    TopicSpec,
)
from switchboard.kafka.decoding import decode_waiting
from switchboard.kafka.producer import Placement
from switchboard.observability.logging import get_logger
from switchboard.observability.metrics import RECORDS_CONSUMED, RECORDS_DEAD_LETTERED

log = get_logger(__name__)

SERVICE = "dispatcher"


@dataclass(frozen=True, slots=True)
class InEvent:
    """A raw record as the stream delivered it."""

    topic: TopicSpec[Any]
    key: bytes | None
    value: bytes | None
    partition: int
    offset: int
    timestamp_ms: int = 0
    headers: tuple[tuple[str, bytes], ...] = ()


class StateStore(Protocol):
    """The conversation table: the local copy; its changelog is written by the processor."""

    @property
    def changelog_topic(self) -> str: ...

    def get(self, key: bytes) -> bytes | None: ...

    def set(self, key: bytes, value: bytes | None, partition: int) -> None: ...


# (physical topic name, key, value); a None value is a tombstone.
Raw = tuple[str, bytes | None, bytes | None]


class Emitter(Protocol):
    def encode(self, topic: TopicSpec[Any], record: Any) -> Raw: ...

    async def send_many(self, items: Sequence[Raw]) -> Sequence[Awaitable[Any]]: ...


class PlacingEmitter(Emitter, Protocol):
    """An emitter that also says where each record landed (for the run-queue check)."""

    async def send_many_placed(self, items: Sequence[Raw]) -> tuple[Sequence[Awaitable[Any]], Sequence[Placement]]: ...


class AdmissionClient(Protocol):
    async def admit(self, demand: Mapping[uuid.UUID, int]) -> Mapping[uuid.UUID, Grant]: ...


class DeadLetters(Protocol):
    async def publish(self, event: InEvent, code: str, message: str) -> None: ...


class DueIndex(Protocol):
    def update(self, key: bytes, org_id: uuid.UUID, due: datetime | None) -> None: ...


@dataclass
class _Group:
    """The events of one conversation in this batch."""

    key: bytes
    org_id: uuid.UUID
    events: list[tuple[InEvent, Record]]
    before: bytes | None
    partition: int  # the conversation's, on every co-partitioned topic and the changelog
    transition: Transition | None = None
    failed: frozenset[int] = frozenset()


# Decisions worth a log line of their own (the others are counted, and recorded on the topic).
_NOTABLE = {
    DispatchOutcome.RECOVERED: logging.WARNING,
    DispatchOutcome.LOST: logging.ERROR,
    DispatchOutcome.BUDGET_EXCEEDED: logging.INFO,
}


class BatchProcessor:
    """See the module docstring."""

    def __init__(
        self,
        *,
        store: StateStore,
        emitter: Emitter,
        admission: AdmissionClient,
        output_emitter: Emitter | None = None,
        dead_letters: DeadLetters,
        index: AgentIndex,
        budgets: Callable[[], BudgetView],
        config: PolicyConfig,
        serde: Serde,
        due: DueIndex | None = None,
        no_match: NoMatchWatch | None = None,
        run_queue: RunQueue | None = None,
        clock: Callable[[], datetime],
    ) -> None:
        self._store = store
        self._emitter = emitter
        # Run requests go through their own producer (its own connection) so that their
        # acknowledgments never queue behind, or ahead of, the next batch's state writes.
        self._outputs = output_emitter or emitter
        self._admission = admission
        self._dead_letters = dead_letters
        self._index = index
        self._budgets = budgets
        self._config = config
        self._serde = serde
        self._due = due
        self._no_match = no_match or NoMatchWatch()
        # Where this worker's run requests wait, so a queued one is not taken for lost (run_queue.py).
        self._run_queue = run_queue
        self._queued = run_queue.still_queued if run_queue is not None else queue_unknown
        self._clock = clock
        # Prometheus label lookups cost more than the increments: keep the children.
        self._counters: dict[Any, Any] = {}
        self._in_flight: list[Awaitable[Any]] = []
        # Leases wait while this worker catches up with its input (restart, outage, backlog).
        self._catch_up = recovery.CatchUp(config.lease_s, max_catch_up_s=config.start_lease_s)
        self._judge_from: datetime | None = None

    async def process(self, events: Sequence[InEvent]) -> None:
        started = time.perf_counter()
        metrics.BATCH_EVENTS.observe(len(events))
        wall_ms = time.time() * 1000
        oldest_ms = 0
        for event in events:
            if event.timestamp_ms:
                metrics.EVENT_WAIT.observe(max(0.0, wall_ms - event.timestamp_ms) / 1000)
                oldest_ms = min(oldest_ms or event.timestamp_ms, event.timestamp_ms)
        groups = await self._decode(events)
        if not groups:
            return
        now = self._clock()
        oldest = datetime.fromtimestamp(oldest_ms / 1000, tz=UTC) if oldest_ms else None
        judge_from = self._catch_up.observe(now, oldest)
        if judge_from is not None and judge_from != self._judge_from:
            log.info("catching up with the input: leases wait", extra={"judge_leases_from": judge_from.isoformat()})
        self._judge_from = judge_from
        budgets = self._budgets()
        # Pass 1: admit every run start and learn what each org wants.
        unlimited = Admission.unlimited()
        for group in groups.values():
            await self._fold(
                group, Context(now, self._index, budgets, unlimited, self._config, judge_from, self._queued)
            )
        decided = time.perf_counter()
        if unlimited.demand:
            grants = await self._grants(unlimited.demand, now)
            short = {org for org, wanted in unlimited.demand.items() if grants[org].admitted < wanted}
            if short:
                # Pass 2, only for orgs granted less than they wanted: exactly what was granted.
                limited = Admission.granted(grants, fallback_retry_at=now + timedelta(seconds=1))
                for group in groups.values():
                    if group.org_id in short:
                        await self._fold(
                            group, Context(now, self._index, budgets, limited, self._config, judge_from, self._queued)
                        )
        admitted = time.perf_counter()
        await self._commit(groups.values(), now)
        metrics.BATCH_SECONDS.labels("decide").observe(decided - started)
        metrics.BATCH_SECONDS.labels("admit").observe(admitted - decided)
        metrics.BATCH_SECONDS.labels("total").observe(time.perf_counter() - started)

    # --------------------------------------------------------------------------- decoding

    async def _decode_one(self, event: InEvent) -> Record | None:
        """The event's record, or None once it is dead-lettered. While the schema registry is down
        the record is fine: its batch (its partition's order with it) waits for the registry
        (``decode_waiting``) — dead-lettered, a customer's message was never answered."""
        try:
            return await decode_waiting(
                self._serde, event.topic, event.value, {"topic": event.topic.name, "offset": event.offset}
            )
        except ContractError as exc:
            await self._dead_letter(event, str(exc.code), exc.message)
            return None

    async def _decode(self, events: Sequence[InEvent]) -> dict[bytes, _Group]:
        groups: dict[bytes, _Group] = {}
        for event in events:
            record = await self._decode_one(event)
            if record is None:
                continue
            try:
                org_id, conversation_id = conversation_of(record)
            except TypeError as exc:
                await self._dead_letter(event, "unexpected_record", str(exc))
                continue
            key = str(conversation_id).encode()
            if event.key != key:
                # A record keyed otherwise sits on another conversation's partition: its
                # state lives elsewhere, so handling it here would fork the conversation.
                await self._dead_letter(event, "key_mismatch", "record key is not its conversation id")
                continue
            group = groups.get(key)
            if group is None:
                group = groups[key] = _Group(
                    key=key, org_id=org_id, events=[], before=self._store.get(key), partition=event.partition
                )
            elif group.org_id != org_id:
                await self._dead_letter(event, "org_mismatch", "record names another org than its conversation")
                continue
            group.events.append((event, record))
            self._consumed(event.topic.name).inc()
            if self._run_queue is not None and isinstance(record, RunStarted | RunHeartbeat | RunCompleted):
                self._run_queue.forget(record.run_id)  # taken by a runner: no longer waiting
        return groups

    # --------------------------------------------------------------------------- folding

    async def _fold(self, group: _Group, ctx: Context) -> None:
        """Apply the group's events to its stored state; an event that raises is dead-lettered."""
        failed = set(group.failed)
        while True:
            checkpoint = ctx.admission.checkpoint()
            state = ConversationState.from_bytes(group.before) if group.before is not None else None
            if state is not None and state.org_id != group.org_id:
                for event, _ in group.events:
                    await self._dead_letter(event, "org_mismatch", "record names another org than its conversation")
                group.transition = Transition(state)
                group.failed = frozenset(range(len(group.events)))
                return
            total = Transition(state)
            current = -1
            try:
                for position, (_, record) in enumerate(group.events):
                    if position in failed:
                        continue
                    current = position
                    total.extend(apply(total.state, record, ctx))
            except Exception as exc:
                ctx.admission.rollback(checkpoint)
                event = group.events[current][0]
                log.error(
                    "event handling failed, dead-lettering",
                    extra={"topic": event.topic.name, "partition": event.partition, "offset": event.offset},
                    exc_info=True,
                )
                failed.add(current)
                if current not in group.failed:
                    await self._dead_letter(event, "handler_failed", f"{type(exc).__name__}: {exc}")
                group.failed = frozenset(failed)
                continue
            group.transition = total
            return

    async def _grants(self, demand: Mapping[uuid.UUID, int], now: datetime) -> Mapping[uuid.UUID, Grant]:
        try:
            return await self._admission.admit(demand)
        except Exception:
            # Never dispatch past an unknown limit, never drop: defer everything a second.
            metrics.ADMISSION_FAILURES.inc()
            log.error("rate-limit admission failed; deferring this batch's run starts", exc_info=True)
            retry = now + timedelta(seconds=1)
            return {org: Grant(0, retry) for org in demand}

    # --------------------------------------------------------------------------- commit

    async def _commit(self, groups: Iterable[_Group], now: datetime) -> None:
        groups_list = list(groups)
        first_wave: list[Raw] = []
        outputs = []
        decisions: list[DispatchDecided] = []
        changelog = self._store.changelog_topic
        for group in groups_list:
            transition = group.transition
            if transition is None:
                continue
            new_state = transition.state
            after = new_state.to_bytes() if new_state is not None else None
            if after != group.before:
                self._store.set(group.key, after, group.partition)
                first_wave.append((changelog, group.key, after))
                if self._due is not None:
                    self._due.update(
                        group.key,
                        group.org_id,
                        (
                            recovery.next_due(new_state, self._config.state_ttl_s, self._config.incarnation)
                            if new_state is not None
                            else None
                        ),
                    )
            decisions.extend(transition.decisions)
            outputs.extend(transition.outputs)
        first_wave.extend(self._emitter.encode(Topics.DISPATCH_DECISIONS, d) for d in decisions)
        await self._settle_outputs()
        flushed = time.perf_counter()
        if first_wave:
            await asyncio.gather(*await self._emitter.send_many(first_wave))
        metrics.BATCH_SECONDS.labels("state_ack").observe(time.perf_counter() - flushed)
        if outputs:
            # Sent, not awaited: nothing waits on these acknowledgments. A run request lost
            # with a crash before its ack is the case the lease covers (docs/dispatcher.md),
            # and the next batch checks that these were written (``_settle_outputs``).
            second_wave = [self._outputs.encode(out.topic, out.record) for out in outputs]
            self._in_flight.extend(await self._send_outputs(second_wave, outputs))
        for decision in decisions:
            self._decided(decision.org_id, decision.outcome.value).inc()
            if decision.outcome in _NOTABLE:
                log.log(
                    _NOTABLE[decision.outcome],
                    f"dispatch decision: {decision.outcome.value}",
                    extra={
                        "organization_id": str(decision.org_id),
                        "conversation_id": str(decision.conversation_id),
                        "agent_id": str(decision.agent_id) if decision.agent_id else None,
                        "run_id": str(decision.run_id) if decision.run_id else None,
                        "attempt": decision.attempt,
                        "parent_run_id": str(decision.parent_run_id) if decision.parent_run_id else None,
                        "request_id": decision.request_id,
                        "reason": decision.reason,
                    },
                )
        for group in groups_list:
            if group.transition is not None:
                for outcome in group.transition.arrivals:
                    self._no_match.record(group.org_id, outcome, now)
        self._no_match.publish()
        if decisions or outputs:
            log.debug("batch committed", extra={"decisions": len(decisions), "outputs": len(outputs)})

    async def _send_outputs(self, encoded: Sequence[Raw], outputs: Sequence[Emit]) -> Sequence[Awaitable[Any]]:
        """Send the second wave; with a run queue, remember where each run request lands."""
        if self._run_queue is None:
            return await self._outputs.send_many(encoded)
        outputs_emitter: PlacingEmitter = self._outputs  # type: ignore[assignment]
        futures, placements = await outputs_emitter.send_many_placed(encoded)
        for out, placement in zip(outputs, placements, strict=True):
            if isinstance(out.record, RunRequested):
                self._run_queue.sent(out.record.run_id, placement)
        return futures

    async def _settle_outputs(self) -> None:
        """Wait for the previous batch's run requests to be acknowledged (raises if one failed)."""
        if self._in_flight:
            waiting, self._in_flight = self._in_flight, []
            started = time.perf_counter()
            await asyncio.gather(*waiting)
            metrics.BATCH_SECONDS.labels("outputs_ack").observe(time.perf_counter() - started)

    def expire_watch(self, now: datetime) -> None:
        """The no-match window moves on with time, not only with batches (the timer calls this)."""
        self._no_match.expire(now)

    async def drain(self) -> None:
        """Wait for every output sent so far (before a graceful stop)."""
        await self._settle_outputs()

    def _consumed(self, topic: str) -> Any:
        counter = self._counters.get(topic)
        if counter is None:
            counter = self._counters[topic] = RECORDS_CONSUMED.labels(SERVICE, topic, "handled")
        return counter

    def _decided(self, org_id: uuid.UUID, outcome: str) -> Any:
        counter = self._counters.get((org_id, outcome))
        if counter is None:
            counter = self._counters[(org_id, outcome)] = metrics.DECISIONS.labels(str(org_id), outcome)
        return counter

    async def _dead_letter(self, event: InEvent, code: str, message: str) -> None:
        log.warning(
            "dead-lettering record",
            extra={"topic": event.topic.name, "partition": event.partition, "offset": event.offset, "error_code": code},
        )
        await self._dead_letters.publish(event, code, message)
        RECORDS_DEAD_LETTERED.labels(SERVICE, event.topic.name, code).inc()


__all__ = ["BatchProcessor", "InEvent"]
