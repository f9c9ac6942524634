"""The outbox relay on a real broker and a real PostgreSQL (scratch database per module).

Consumers deduplicate by ``event_id``: a duplicate is allowed only as a re-publication
of an event already seen, byte for byte, and never changes the order of first sightings.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import text

from switchboard.contracts import DeadLetter, Serde, Topics, encode_key
from switchboard.db.outbox import enqueue
from switchboard.kafka import admin
from switchboard.kafka.outbox_relay import LOCK_KEY
from switchboard.settings import DatabaseSettings, KafkaSettings
from tests.integration.db.conftest import MigratedDatabase
from tests.support.pgbouncer import pgbouncer

from .conftest import (
    Consumed,
    Writer,
    app_url,
    lock_holder_pid,
    pending_count,
    published_count,
    read_topic,
    relay_processes,
    relay_settings,
    running_relay,
    wait_healthy,
    wait_until,
)

pytestmark = pytest.mark.integration


def _first_sightings(records: list[Consumed], serde: Serde) -> dict[uuid.UUID, list[str]]:
    """Per key, event ids in offset order with re-publications dropped (what a deduplicating consumer sees).

    Also checks the rules every record must keep: the ``event_id`` header equals the
    record's field, and a duplicate is the same bytes as its first copy.
    """
    first: dict[str, Consumed] = {}
    order: dict[uuid.UUID, list[str]] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        decoded = serde.decode(Topics.RUN_STARTED, record.value)
        event_id = str(decoded.event_id)
        assert record.headers["event_id"].decode() == event_id
        assert record.key == encode_key(Topics.RUN_STARTED, decoded)
        if event_id in first:
            assert (first[event_id].key, first[event_id].value) == (record.key, record.value)
            continue
        first[event_id] = record
        order.setdefault(decoded.conversation_id, []).append(event_id)
    return order


async def test_committed_rows_are_published_once_in_key_order_rolled_back_ones_never(
    outbox_db: MigratedDatabase, topics: KafkaSettings
) -> None:
    writer = Writer(outbox_db, topics)
    keys = [uuid.uuid4() for _ in range(5)]
    rolled_back: list[str] = []
    for round_ in range(40):
        writer.commit(keys)
        if round_ % 10 == 0:
            rolled_back += [e.event_id for e in writer.commit(keys[:2], rollback=True)]

    async with running_relay(relay_settings(outbox_db, topics, batch_size=37)):
        await wait_until(lambda: pending_count(outbox_db) == 0, timeout_s=20, what="outbox drained")
        # Rows committed while the relay is idle are picked up too.
        writer.commit(keys)
        await wait_until(lambda: pending_count(outbox_db) == 0, timeout_s=10, what="late rows drained")

    records = await read_topic(topics, Topics.RUN_STARTED.name)
    serde = Serde.from_settings(topics)
    ids = [str(serde.decode(Topics.RUN_STARTED, r.value).event_id) for r in records]
    assert len(ids) == len(writer.events) == 41 * 5
    assert Counter(ids).most_common(1)[0][1] == 1, "no crash, so no duplicate"
    assert _first_sightings(records, serde) == writer.per_key()
    assert not set(rolled_back) & set(ids)


async def test_sigkilled_relay_loses_nothing_and_keeps_key_order_after_restart(
    outbox_db: MigratedDatabase, topics: KafkaSettings
) -> None:
    writer = Writer(outbox_db, topics)
    keys = [uuid.uuid4() for _ in range(8)]
    # A backlog, so each relay is busy (mid-batch) when it dies, and writes that go on meanwhile.
    for _ in range(150):
        writer.commit(keys)

    async def write_more() -> None:
        for _ in range(150):
            await asyncio.to_thread(writer.commit, keys)

    writing = asyncio.create_task(write_more())
    batch = 40
    for kill_at in (300, 700, 1100):
        with relay_processes(outbox_db, topics, OUTBOX_RELAY_BATCH_SIZE=str(batch)) as (relay,):
            await wait_until(
                lambda n=kill_at: published_count(outbox_db) >= n, timeout_s=30, what=f"{kill_at} published"
            )
            os.kill(relay.pid, signal.SIGKILL)
            relay.proc.wait(timeout=10)
        assert pending_count(outbox_db) > 0, "the relay must be killed mid-stream"

    with relay_processes(outbox_db, topics, OUTBOX_RELAY_BATCH_SIZE=str(batch)) as (last,):
        await writing
        await wait_until(lambda: pending_count(outbox_db) == 0, timeout_s=30, what="last relay drained the outbox")
        wait_healthy(last)
        assert last.metric("switchboard_outbox_relay_leader") == 1
        # SIGTERM is the graceful way out: exit 0, lock released.
        last.proc.send_signal(signal.SIGTERM)
        assert last.proc.wait(timeout=10) == 0
        assert lock_holder_pid(outbox_db) is None

    records = await read_topic(topics, Topics.RUN_STARTED.name)
    serde = Serde.from_settings(topics)
    # Every event, in its key's order; a duplicate only as a byte-identical copy (same event_id).
    assert _first_sightings(records, serde) == writer.per_key()
    duplicates = len(records) - len(writer.events)
    # At most what each killed relay had sent but not yet marked: its batch in hand.
    assert 0 <= duplicates <= 3 * batch, duplicates


async def test_only_one_relay_publishes_and_the_other_takes_over_when_it_dies(
    outbox_db: MigratedDatabase, topics: KafkaSettings
) -> None:
    writer = Writer(outbox_db, topics)
    keys = [uuid.uuid4() for _ in range(4)]
    with relay_processes(outbox_db, topics, count=2) as relays:
        for relay in relays:
            wait_healthy(relay)
        await wait_until(lambda: lock_holder_pid(outbox_db) is not None, timeout_s=15, what="a leader")
        leader_pid = lock_holder_pid(outbox_db)
        leader, follower = sorted(relays, key=lambda r: r.pid != leader_pid)

        for _ in range(50):
            writer.commit(keys)
        await wait_until(lambda: pending_count(outbox_db) == 0, timeout_s=15, what="leader drained the outbox")
        assert leader.metric("switchboard_outbox_published_total") == 200
        assert leader.metric("switchboard_outbox_relay_leader") == 1
        assert follower.metric("switchboard_outbox_published_total") == 0
        assert follower.metric("switchboard_outbox_relay_leader") == 0

        os.kill(leader.pid, signal.SIGKILL)
        leader.proc.wait(timeout=10)
        started = time.monotonic()
        await wait_until(lambda: lock_holder_pid(outbox_db) == follower.pid, timeout_s=10, what="takeover")
        takeover_s = time.monotonic() - started
        for _ in range(50):
            writer.commit(keys)
        await wait_until(lambda: pending_count(outbox_db) == 0, timeout_s=15, what="new leader drained the outbox")
        assert follower.metric("switchboard_outbox_published_total") == 200
        assert follower.metric("switchboard_outbox_relay_leader") == 1
    assert takeover_s < 5

    records = await read_topic(topics, Topics.RUN_STARTED.name)
    assert len(records) == 400, "the leader marked everything it published before it died: no duplicate"
    assert _first_sightings(records, Serde.from_settings(topics)) == writer.per_key()


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_poison_rows_are_dead_lettered_and_hold_back_only_their_own_key(
    outbox_db: MigratedDatabase, topics: KafkaSettings
) -> None:
    """The rule: a failing row holds back the later rows of its (topic, key) until it is
    published or, after ``max_attempts`` failures of its own, dead-lettered; other keys go on."""
    writer = Writer(outbox_db, topics)
    stuck, free = uuid.uuid4(), uuid.uuid4()
    stuck_key = encode_key(Topics.RUN_STARTED, writer.record(stuck))
    writer.commit([stuck, free])
    with outbox_db.app_session() as session, session.begin():
        too_large = enqueue(
            session,
            topic=Topics.RUN_STARTED.name,
            key=stuck_key,
            payload=b"\0" * (2 * 1024 * 1024),
            headers={"event_id": str(uuid.uuid4())},
        )
        unknown = enqueue(session, topic="no_such_topic", key=b"k1", payload=b"hello", headers={"event_id": "e-1"})
        poison_ids = {too_large: "record_too_large", unknown: "unknown_topic"}
    for _ in range(3):
        writer.commit([stuck, free])

    settings = relay_settings(outbox_db, topics, max_attempts=3, retry_backoff_s=0.1, retry_backoff_max_s=0.2)
    async with running_relay(settings):
        await wait_until(lambda: pending_count(outbox_db) == 0, timeout_s=20, what="outbox drained")

    with outbox_db.owner_engine.connect() as conn:
        rows = {r.id: r for r in conn.execute(text("SELECT * FROM outbox ORDER BY id"))}
    for row_id, code in poison_ids.items():
        poison = rows[row_id]
        assert poison.published_at is None and poison.dead_lettered_at is not None
        assert poison.attempts == 3 and poison.last_error.startswith(code)
    dead_at = rows[too_large].dead_lettered_at
    later = [r for r in rows.values() if r.id > too_large and r.topic == Topics.RUN_STARTED.name]
    stuck_later = [r for r in later if r.key == stuck_key]
    free_later = [r for r in later if r.key != stuck_key]
    assert stuck_later and all(r.published_at >= dead_at for r in stuck_later), "its key waited for it"
    assert free_later and all(r.published_at < dead_at for r in free_later), "other keys did not wait"

    records = await read_topic(topics, Topics.RUN_STARTED.name)
    assert len(records) == len(writer.events)
    assert _first_sightings(records, Serde.from_settings(topics)) == writer.per_key()

    serde = Serde.from_settings(topics)
    letters = {
        int(r.headers["dlq.outbox_id"]): serde.decode(Topics.DEAD_LETTER, r.value)
        for r in await read_topic(topics, Topics.DEAD_LETTER.name)
    }
    assert set(letters) == set(poison_ids)
    big, odd = letters[too_large], letters[unknown]
    assert isinstance(big, DeadLetter) and isinstance(odd, DeadLetter)
    assert (big.error_code, big.attempts, big.original_key) == ("record_too_large", 3, stuck_key)
    assert big.original_value is None, "too large to carry; it stays in the outbox row"
    assert big.original_topic == Topics.RUN_STARTED.physical_name(topics)
    assert (odd.error_code, odd.original_value, odd.original_key) == ("unknown_topic", b"hello", b"k1")
    assert odd.original_topic == f"{topics.topic_prefix}no_such_topic"
    assert [(h.key, h.value) for h in odd.original_headers] == [("event_id", b"e-1")]


async def test_metrics_show_the_backlog_and_its_age_until_it_drains(
    outbox_db: MigratedDatabase, kafka_settings: KafkaSettings
) -> None:
    # The topics do not exist yet: the relay holds the rows back, as during a broker misconfiguration.
    writer = Writer(outbox_db, kafka_settings)
    for _ in range(5):
        writer.commit([uuid.uuid4() for _ in range(4)])
    published_before = _sample("switchboard_outbox_published_total", topic="run_started")
    unavailable_before = _sample(
        "switchboard_outbox_publish_failures_total", topic="run_started", error_code="topic_unavailable"
    )

    try:
        async with running_relay(relay_settings(outbox_db, kafka_settings)):
            await wait_until(
                lambda: (
                    _sample("switchboard_outbox_backlog") == 20 and _sample("switchboard_outbox_oldest_age_seconds") > 0
                ),
                timeout_s=10,
                what="backlog gauges",
            )
            assert _sample("switchboard_outbox_relay_leader") == 1
            age = _sample("switchboard_outbox_oldest_age_seconds")
            await wait_until(
                lambda: _sample("switchboard_outbox_oldest_age_seconds") >= age + 1, timeout_s=5, what="age grows"
            )
            assert _sample("switchboard_outbox_backlog") == 20
            assert (
                _sample(
                    "switchboard_outbox_publish_failures_total", topic="run_started", error_code="topic_unavailable"
                )
                > unavailable_before
            )

            await admin.ensure_topics(kafka_settings)
            await wait_until(
                lambda: _sample("switchboard_outbox_backlog") == 0, timeout_s=15, what="backlog gauge back to 0"
            )
            assert _sample("switchboard_outbox_oldest_age_seconds") == 0
            assert _sample("switchboard_outbox_published_total", topic="run_started") - published_before == 20
        assert _sample("switchboard_outbox_relay_leader") == 0
    finally:
        await admin.delete_topics(kafka_settings)


async def test_published_and_dead_lettered_rows_are_pruned_after_their_retention_in_batches(
    outbox_db: MigratedDatabase, kafka_settings: KafkaSettings
) -> None:
    with outbox_db.owner_engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO outbox (topic, key, payload, created_at, published_at)"
                " SELECT 'run_started', NULL, 'x', now() - interval '9 days', now() - interval '8 days'"
                " FROM generate_series(1, 2500)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO outbox (topic, payload, created_at, published_at, dead_lettered_at) VALUES"
                " ('run_started', 'recent', now(), now() - interval '1 day', NULL),"
                " ('run_started', 'dead-old', now(), NULL, now() - interval '31 days'),"
                " ('run_started', 'dead-recent', now(), NULL, now() - interval '29 days'),"
                # Pending rows are never pruned, however old (the topics do not exist: they stay pending).
                " ('run_started', 'pending-old', now() - interval '60 days', NULL, NULL)"
            )
        )
    pruned_before = _sample("switchboard_outbox_pruned_total", state="published")

    def remaining() -> list[bytes]:
        with outbox_db.owner_engine.connect() as conn:
            return [bytes(p) for p in conn.execute(text("SELECT payload FROM outbox ORDER BY payload")).scalars()]

    async with running_relay(relay_settings(outbox_db, kafka_settings, prune_batch_size=1000)):
        await wait_until(lambda: len(remaining()) == 3, timeout_s=15, what="old rows pruned")
    assert remaining() == [b"dead-recent", b"pending-old", b"recent"]
    assert _sample("switchboard_outbox_pruned_total", state="published") - pruned_before == 2500


@pytest.mark.parametrize("enabled", [True, False])
async def test_the_api_runs_the_relay_in_its_lifespan_unless_disabled(
    outbox_db: MigratedDatabase, topics: KafkaSettings, enabled: bool
) -> None:
    from services.api.app import create_app
    from services.api.settings import ApiSettings

    writer = Writer(outbox_db, topics)
    settings = ApiSettings(database=DatabaseSettings(url=app_url(outbox_db)), kafka=topics, outbox_relay=enabled)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        writer.commit([uuid.uuid4()])
        if enabled:
            await wait_until(lambda: pending_count(outbox_db) == 0, timeout_s=10, what="the API's relay published")
            assert lock_holder_pid(outbox_db) == os.getpid()
        else:
            await asyncio.sleep(1)
            assert app.state.outbox_relay is None and pending_count(outbox_db) == 1
    # Closing the lock connection releases the lock when PostgreSQL ends that session, a moment later.
    await wait_until(lambda: lock_holder_pid(outbox_db) is None, timeout_s=5, what="shutdown released the lock")


async def test_wake_ends_the_idle_pause_at_once(outbox_db: MigratedDatabase, topics: KafkaSettings) -> None:
    """A writer in the relay's process calls ``wake()`` after its commit (the API's webhook group
    commit): the row is published long before the idle pause would have ended."""
    writer = Writer(outbox_db, topics)
    slow = relay_settings(outbox_db, topics, idle_poll_min_s=8.0, idle_poll_max_s=8.0)
    async with running_relay(slow) as relay:
        await wait_until(lambda: relay.leading, timeout_s=10, what="relay leading")
        await asyncio.sleep(0.5)  # now in its first 8 s pause
        writer.commit([uuid.uuid4()])
        woken_at = time.monotonic()
        relay.wake()
        await wait_until(lambda: pending_count(outbox_db) == 0, timeout_s=5, what="woken relay published")
        assert time.monotonic() - woken_at < 4.0


async def test_through_a_transaction_pooler_one_relay_leads_and_its_lock_holds_back_no_vacuum(
    outbox_db: MigratedDatabase, topics: KafkaSettings
) -> None:
    """Operators put PgBouncer in front of PostgreSQL (docs/deploy.md). In transaction mode a lock
    taken in a session stays on a server session the next client gets, and that client is granted
    the same lock: two relays would lead. The relay's lock lives in a transaction it keeps open,
    which pins its server session through the pooler."""
    writer = Writer(outbox_db, topics)
    keys = [uuid.uuid4() for _ in range(4)]
    with _default_isolation(outbox_db, "repeatable read"), pgbouncer(outbox_db.app_url, pool_size=2) as pooled:
        settings = relay_settings(outbox_db, topics, database=DatabaseSettings(url=pooled.render_as_string()))
        async with running_relay(settings) as first:
            await wait_until(lambda: first.leading, timeout_s=15, what="a leader through the pooler")
            async with running_relay(settings) as second:
                both = samples = 0
                for _ in range(30):
                    writer.commit(keys)
                    for _ in range(5):
                        await asyncio.sleep(0.02)
                        samples += 1
                        both += first.leading and second.leading
                await wait_until(lambda: pending_count(outbox_db) == 0, timeout_s=20, what="the outbox drained")
                assert both == 0, f"two relays led at once in {both} of {samples} samples"
                assert first.leading and not second.leading
                lock_session = await _idle_lock_session(outbox_db)
    assert lock_session.state == "idle in transaction"
    assert (lock_session.backend_xid, lock_session.backend_xmin) == (None, None), "the lock holds back vacuum"

    records = await read_topic(topics, Topics.RUN_STARTED.name)
    assert len(records) == 120, "each row published once"
    assert _first_sightings(records, Serde.from_settings(topics)) == writer.per_key()


async def test_a_frozen_leader_loses_the_lock_to_its_idle_timeout_and_a_follower_takes_over(
    outbox_db: MigratedDatabase, topics: KafkaSettings
) -> None:
    """A leader that stops running (SIGSTOP: a frozen VM, a debugger) keeps its TCP connections
    alive, so no keepalive ends its session, and behind a pooler none reaches the server at all:
    the lock's transaction ends after the idle timeout the relay set in it, and a follower leads."""
    writer = Writer(outbox_db, topics)
    keys = [uuid.uuid4() for _ in range(3)]
    # Idle timeout = 2 * (request timeout + check interval + check timeout) = 5 s.
    timing = {
        "OUTBOX_RELAY_REQUEST_TIMEOUT_S": "1",
        "OUTBOX_RELAY_LOCK_CHECK_S": "0.5",
        "OUTBOX_RELAY_LOCK_CHECK_TIMEOUT_S": "1",
    }
    with relay_processes(outbox_db, topics, count=2, **timing) as relays:
        for relay in relays:
            wait_healthy(relay)
        await wait_until(lambda: lock_holder_pid(outbox_db) is not None, timeout_s=15, what="a leader")
        leader_pid = lock_holder_pid(outbox_db)
        leader, follower = sorted(relays, key=lambda r: r.pid != leader_pid)
        writer.commit(keys)
        await wait_until(lambda: pending_count(outbox_db) == 0, timeout_s=15, what="the leader drained the outbox")

        os.kill(leader.pid, signal.SIGSTOP)
        try:
            frozen_at = time.monotonic()
            await wait_until(lambda: lock_holder_pid(outbox_db) == follower.pid, timeout_s=25, what="takeover")
            takeover_s = time.monotonic() - frozen_at
            for _ in range(10):
                writer.commit(keys)
            await wait_until(lambda: pending_count(outbox_db) == 0, timeout_s=15, what="the follower drained it")
        finally:
            os.kill(leader.pid, signal.SIGCONT)
        await asyncio.sleep(2)  # the old leader runs again and finds its lock gone
        assert lock_holder_pid(outbox_db) == follower.pid
        assert leader.metric("switchboard_outbox_relay_leader") == 0
        assert follower.metric("switchboard_outbox_relay_leader") == 1
    assert 4 < takeover_s < 15, takeover_s

    records = await read_topic(topics, Topics.RUN_STARTED.name)
    assert _first_sightings(records, Serde.from_settings(topics)) == writer.per_key()


@contextmanager
def _default_isolation(db: MigratedDatabase, level: str) -> Iterator[None]:
    """A database whose sessions start at ``level`` (a setting some operators choose): the relay's
    long lock transaction must still hold no snapshot between its statements."""
    with db.owner_engine.connect() as conn:
        conn.execute(text(f"ALTER DATABASE {db.name} SET default_transaction_isolation = '{level}'"))
        conn.commit()
    try:
        yield
    finally:
        with db.owner_engine.connect() as conn:
            conn.execute(text(f"ALTER DATABASE {db.name} RESET default_transaction_isolation"))
            conn.commit()


async def _idle_lock_session(db: MigratedDatabase) -> Any:
    """The lock holder's pg_stat_activity row, seen between two of its checks (not mid-statement)."""
    query = text(
        "SELECT a.state, a.backend_xid::text AS backend_xid, a.backend_xmin::text AS backend_xmin"
        " FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
        " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        " AND ((l.classid::bigint << 32) | l.objid::bigint) = :key"
    )
    deadline = time.monotonic() + 10
    while True:
        with db.app_engine.connect() as conn:  # the relay's role: its sessions' details are visible to it
            row = conn.execute(query, {"key": LOCK_KEY}).one()
        if row.state != "active" or time.monotonic() > deadline:
            return row
        await asyncio.sleep(0.05)
