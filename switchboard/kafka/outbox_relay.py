"""The transactional outbox relay: publish ``outbox`` rows to Kafka, in order, at least once.

Writers add an already-encoded record to the ``outbox`` table in the same
transaction as the change it announces (``switchboard.db.outbox``). This relay
takes the pending rows in ``id`` order, produces them with an idempotent producer
(``acks=all``), and marks them ``published_at`` only after the broker acknowledged
them. The rules it keeps (docs/api.md, "Outbox relay", says why):

- **One active relay.** Every instance contends for a PostgreSQL advisory lock held
  on a dedicated connection; the holder publishes, the others retry every
  ``lock_retry_s`` and take over when the holder's connection closes (process
  death closes it at once). The leader checks that connection every
  ``lock_check_s``, and before sending each batch, and steps down when it cannot.
- **The lock lives in an open transaction** (``pg_try_advisory_xact_lock``), not in the
  session: a transaction pooler (PgBouncer ``pool_mode = transaction``, CloudNativePG's
  ``Pooler``) keeps a client on one server session only while a transaction is open, so
  a session-level lock taken through it would stay on a server session that other
  clients then use — a second relay landing there is granted the same lock, and two
  relays publish the same keys out of order. The open transaction pins the session to
  the leader through any pooler. It takes no transaction id and, between its checks,
  no snapshot, so it holds back no vacuum (the tests check ``backend_xid`` and
  ``backend_xmin``); ``pg_stat_activity`` shows it *idle in transaction* under the
  relay's ``application_name``.
- **Order per key.** Rows are sent in ``id`` order; a row that fails holds back every
  later row of the same (topic, key) until it is published or dead-lettered.
- **At least once.** A crash between the broker's ack and the ``published_at`` update
  publishes those rows again after restart: consumers deduplicate by the record's
  ``event_id`` (also in the ``event_id`` header).
- **No poison pill.** A failure caused by the row itself (unknown topic name, record
  too large) counts an attempt; after ``max_attempts`` the row goes to the
  dead-letter topic and is marked ``dead_lettered_at``, releasing its key. A broker
  outage or a missing topic counts nothing and is retried with backoff forever.
- **Polling, not LISTEN/NOTIFY.** Back to back while there is work; when idle, the
  pause doubles from ``idle_poll_min_s`` to ``idle_poll_max_s``. A writer in the same
  process (the API's webhook group commit) calls ``wake()`` after its commit, which
  ends the pause at once: the hot path's records do not wait up to a pause each.
- **Two connections.** The lock's, and one where the leader runs its statements in
  autocommit (each is one statement; only the leader touches unpublished rows), with raw
  psycopg: no pool, no transaction round trips, no SQLAlchemy on a loop that runs the
  same few statements thousands of times a minute.
- **Pruning.** Published rows older than ``retention`` (and dead-lettered rows older
  than ``dead_letter_retention``) are deleted in small batches between publishes.

Run it alone (``switchboard outbox-relay``) or inside the API (``API_OUTBOX_RELAY``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import socket
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Final

import psycopg
from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    CorruptRecordException,
    InvalidTimestampError,
    InvalidTopicError,
    KafkaError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from psycopg.pq import TransactionStatus
from psycopg.rows import namedtuple_row
from pydantic import Field
from pydantic_settings import SettingsConfigDict
from sqlalchemy.engine import make_url

from switchboard.contracts import DeadLetter, Header, Serde, Topics, encode_key, topic_named
from switchboard.kafka.errors import SIZE_ERRORS
from switchboard.observability.logging import get_logger
from switchboard.observability.metrics import (
    OUTBOX_BACKLOG,
    OUTBOX_DEAD_LETTERED_ROWS,
    OUTBOX_OLDEST_AGE,
    OUTBOX_ORDER_BROKEN,
    OUTBOX_PRUNED,
    OUTBOX_PUBLISH_DELAY,
    OUTBOX_PUBLISH_FAILURES,
    OUTBOX_PUBLISHED,
    OUTBOX_RELAY_LEADER,
    RECORDS_DEAD_LETTERED,
    RECORDS_PRODUCED,
)
from switchboard.observability.scrubbing import scrub_text
from switchboard.settings import ServiceSettings

log = get_logger(__name__)

# Key of the advisory lock (held in the leader's open transaction) that elects the one active relay of a
# database (advisory locks are per database). Derived from a name so it is stable
# and unlikely to collide with any other advisory lock user.
LOCK_KEY: Final = int.from_bytes(hashlib.sha256(b"switchboard:outbox-relay").digest()[:8], "big", signed=True)
# application_name of the lock connection: pg_stat_activity shows which process leads.
APPLICATION_NAME: Final = "switchboard-outbox-relay"
# The backlog gauge counts at most this many rows, so a huge backlog stays cheap to measure.
BACKLOG_COUNT_CAP: Final = 1_000_000


class OutboxRelaySettings(ServiceSettings):
    """Tuning of the relay (env prefix ``OUTBOX_RELAY_``); Kafka and PostgreSQL come from the shared settings."""

    model_config = SettingsConfigDict(env_prefix="OUTBOX_RELAY_")

    # Rows per fetch, and the most payload bytes one fetch may carry.
    batch_size: int = Field(default=500, ge=1, le=10_000)
    max_batch_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    # Pause after an empty fetch: starts at min, doubles up to max while idle.
    idle_poll_min_s: float = Field(default=0.01, gt=0)
    idle_poll_max_s: float = Field(default=0.1, gt=0)
    # Followers try the lock this often; the leader checks its lock connection this often.
    lock_retry_s: float = Field(default=1.0, gt=0)
    lock_check_s: float = Field(default=1.0, gt=0)
    lock_check_timeout_s: float = Field(default=5.0, gt=0)
    # Failures caused by the row itself before it is dead-lettered.
    max_attempts: int = Field(default=5, ge=1)
    # Backoff of a failing row (and of an unavailable topic or broker): doubles up to max.
    retry_backoff_s: float = Field(default=0.5, gt=0)
    retry_backoff_max_s: float = Field(default=30.0, gt=0)
    # How long to wait for a topic's metadata before holding that topic back.
    metadata_timeout_s: float = Field(default=2.0, gt=0)
    # The producer's max_request_size: larger records are refused before sending (dead-lettered).
    max_record_bytes: int = Field(default=1_048_576, ge=1024)
    # The broker must ack within this (the producer retries internally until then).
    request_timeout_s: float = Field(default=30.0, gt=0)
    metrics_interval_s: float = Field(default=5.0, gt=0)
    retention: timedelta = timedelta(days=7)
    dead_letter_retention: timedelta = timedelta(days=30)
    prune_interval_s: float = Field(default=60.0, gt=0)
    prune_batch_size: int = Field(default=1000, ge=1)
    # When embedded (``stop()``): how long the batch in hand may take before the task is cancelled.
    stop_timeout_s: float = Field(default=5.0, gt=0)


class FailureKind(StrEnum):
    """Who is to blame for a failed publish, which decides what happens next."""

    RECORD = "record"  # the row itself: counts an attempt, dead-lettered after max_attempts
    TOPIC = "topic"  # the topic is missing or forbidden on the broker: hold the whole topic
    BROKER = "broker"  # the broker is unreachable or slow: hold the key, back off, never dead-letter


@dataclass(frozen=True, slots=True)
class Failure:
    kind: FailureKind
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class OutboxRow:
    id: int
    topic: str
    key: bytes | None
    payload: bytes
    headers: dict[str, Any]
    attempts: int
    created_at: datetime

    @property
    def order_key(self) -> tuple[str, bytes] | int:
        """What must stay in order: (topic, key); a row without a key is ordered with nothing."""
        return (self.topic, self.key) if self.key is not None else self.id

    @property
    def event_id(self) -> str | None:
        value = self.headers.get("event_id")
        return str(value) if value else None


@dataclass
class BatchResult:
    fetched: int = 0
    published: int = 0
    failed: int = 0
    dead_lettered: int = 0


@dataclass
class _Holds:
    """In-memory backoff state: which keys, rows and topics wait, and until when (monotonic)."""

    keys: dict[tuple[str, bytes] | int, float] = field(default_factory=dict)
    row_streaks: dict[int, int] = field(default_factory=dict)
    topics: dict[str, float] = field(default_factory=dict)
    topic_streaks: dict[str, int] = field(default_factory=dict)
    broker_streak: int = 0
    paused_until: float = 0.0

    def expire(self, now: float) -> None:
        self.keys = {k: until for k, until in self.keys.items() if until > now}
        self.topics = {t: until for t, until in self.topics.items() if until > now}


class LeadershipLost(Exception):
    """The lock connection failed: another relay may be leading now."""


class UnknownTopicName(Exception):
    """The row names a topic the registry does not know."""


_RECORD_ERRORS: Final = (
    *SIZE_ERRORS,
    CorruptRecordException,
    InvalidTimestampError,
    InvalidTopicError,
)
_TOPIC_ERRORS: Final = (UnknownTopicOrPartitionError, TopicAuthorizationFailedError)


def classify(exc: BaseException) -> Failure:
    """Map an exception from preparing or sending one row to who is to blame."""
    message = scrub_text(f"{type(exc).__name__}: {exc}")[:1000]
    if isinstance(exc, UnknownTopicName):
        return Failure(FailureKind.RECORD, "unknown_topic", message)
    if isinstance(exc, SIZE_ERRORS):
        return Failure(FailureKind.RECORD, "record_too_large", message)
    if isinstance(exc, _RECORD_ERRORS):
        return Failure(FailureKind.RECORD, "record_rejected", message)
    if isinstance(exc, _TOPIC_ERRORS):
        return Failure(FailureKind.TOPIC, "topic_unavailable", message)
    if isinstance(exc, KafkaError | asyncio.TimeoutError | OSError):
        return Failure(FailureKind.BROKER, "broker_unavailable", message)
    if isinstance(exc, TypeError | ValueError):
        return Failure(FailureKind.RECORD, "invalid_record", message)
    return Failure(FailureKind.BROKER, "unexpected_error", message)


def kafka_headers(headers: dict[str, Any]) -> list[tuple[str, bytes]]:
    """The row's jsonb headers as Kafka headers (strings as UTF-8, anything else as JSON)."""
    return [
        (str(name), value.encode() if isinstance(value, str) else json.dumps(value, separators=(",", ":")).encode())
        for name, value in headers.items()
    ]


def _conninfo(url: str) -> str:
    """A libpq URI for psycopg from our SQLAlchemy URL (``postgresql+psycopg://`` -> ``postgresql://``)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def _close_quietly(*conns: psycopg.AsyncConnection[Any] | None) -> None:
    """Close them all, whatever their state; shielded, so a caller cancelled meanwhile still closes them."""
    closing = [conn.close() for conn in conns if conn is not None]
    if closing:
        await asyncio.shield(asyncio.gather(*closing, return_exceptions=True))


async def _sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less if ``stop`` is set meanwhile."""
    if seconds <= 0 or stop.is_set():
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)


# Taken inside a transaction the leader keeps open (the module docstring says why), with that
# transaction's idle timeout, which ends it, hence the lock, if its relay stops using it.
_TRY_LOCK = """
    SELECT set_config('idle_in_transaction_session_timeout', %(idle_ms)s, true),
           pg_try_advisory_xact_lock(%(key)s) AS locked
"""

_FETCH = """
    WITH candidates AS (
        SELECT id, topic, key, payload, headers, attempts, created_at,
               octet_length(payload) + coalesce(octet_length(key), 0) AS size
        FROM outbox
        WHERE published_at IS NULL AND dead_lettered_at IS NULL
          AND topic <> ALL(CAST(%(held_topics)s AS text[]))
          AND id <> ALL(CAST(%(held_ids)s AS bigint[]))
          AND NOT EXISTS (
              SELECT 1 FROM unnest(CAST(%(held_key_topics)s AS text[]), CAST(%(held_keys)s AS bytea[])) AS h(topic, key)
              WHERE h.topic = outbox.topic AND h.key = outbox.key
          )
        ORDER BY id
        LIMIT %(limit)s
    )
    SELECT id, topic, key, payload, headers, attempts, created_at
    FROM (SELECT *, sum(size) OVER (ORDER BY id) - size AS bytes_before FROM candidates) AS c
    WHERE bytes_before < %(max_bytes)s
    ORDER BY id
    """
_MARK_PUBLISHED = "UPDATE outbox SET published_at = now() WHERE id = ANY(CAST(%(ids)s AS bigint[]))"
_COUNT_ATTEMPT = (
    "UPDATE outbox SET attempts = attempts + 1, last_error = %(error)s WHERE id = %(id)s AND published_at IS NULL"
    " RETURNING attempts"
)
_NOTE_ERROR = "UPDATE outbox SET last_error = %(error)s WHERE id = ANY(CAST(%(ids)s AS bigint[]))"
_MARK_DEAD = (
    "UPDATE outbox SET dead_lettered_at = now() WHERE id = %(id)s AND published_at IS NULL AND dead_lettered_at IS NULL"
)
_BACKLOG = f"""
    SELECT
      (SELECT count(*) FROM (SELECT 1 FROM outbox WHERE published_at IS NULL AND dead_lettered_at IS NULL
                             LIMIT {BACKLOG_COUNT_CAP}) AS p) AS pending,
      (SELECT EXTRACT(EPOCH FROM now() - created_at) FROM outbox
        WHERE published_at IS NULL AND dead_lettered_at IS NULL ORDER BY id LIMIT 1) AS oldest_age_s,
      (SELECT count(*) FROM outbox WHERE dead_lettered_at IS NOT NULL) AS dead_lettered
    """
_PRUNE_PUBLISHED = """
    DELETE FROM outbox WHERE id IN (
        SELECT id FROM outbox
        WHERE published_at < now() - make_interval(secs => CAST(%(age_s)s AS double precision))
        ORDER BY published_at LIMIT %(limit)s)
    """
_PRUNE_DEAD = """
    DELETE FROM outbox WHERE id IN (
        SELECT id FROM outbox
        WHERE dead_lettered_at < now() - make_interval(secs => CAST(%(age_s)s AS double precision))
        ORDER BY dead_lettered_at LIMIT %(limit)s)
    """


@dataclass(frozen=True, slots=True)
class _Result:
    rows: list[Any]
    rowcount: int


class OutboxRelay:
    """One relay instance. ``run(stop)`` until ``stop`` is set, or ``start()`` / ``stop()`` in the background."""

    def __init__(self, settings: OutboxRelaySettings, *, service: str = "outbox-relay") -> None:
        self._settings = settings
        self._service = service
        self._kafka = settings.kafka
        self._serde = Serde.from_settings(settings.kafka)
        self._url = settings.database.url.get_secret_value()
        self._conn: psycopg.AsyncConnection[Any] | None = None  # the statements' connection, while leading
        self._lock_conn: psycopg.AsyncConnection[Any] | None = None  # holds the lock, while leading
        self._producer: Any = None
        # A broker failure seen: the next batch goes through a new producer (``_renew_producer``).
        self._producer_suspect = False
        self._holds = _Holds()
        self._leading = False
        self._connected = False
        self._last_backlog: int | None = None
        self._next_metrics = 0.0
        self._next_prune = 0.0
        self._next_lock_check = 0.0
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._stopping: asyncio.Event | None = None
        self._woken = asyncio.Event()  # rows committed in this process since the last poll

    # ------------------------------------------------------------------ lifecycle

    @property
    def leading(self) -> bool:
        """True while this instance holds the lock and publishes."""
        return self._leading

    async def ready(self) -> bool:
        """Readiness: connected to PostgreSQL (as leader or as a waiting follower)."""
        return self._connected

    def wake(self) -> None:
        """New outbox rows were committed in this process: poll now rather than after the pause."""
        self._woken.set()

    def start(self) -> None:
        """Run in a background task of the current event loop (the API does this)."""
        if self._task is not None:
            raise RuntimeError("outbox relay already started")
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self.run(self._stop), name="outbox-relay")

    async def stop(self, timeout_s: float | None = None) -> None:
        """Finish the batch in hand, release the lock, close connections; cancel after ``timeout_s``."""
        if self._task is None or self._stop is None:
            return
        timeout_s = self._settings.stop_timeout_s if timeout_s is None else timeout_s
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout=timeout_s)
        except TimeoutError:
            log.warning("outbox relay did not stop in time; cancelling", extra={"timeout_s": timeout_s})
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        finally:
            self._task = None

    async def run(self, stop: asyncio.Event) -> None:
        """Contend for the lock, lead until ``stop`` or until the lock is lost, and again."""
        self._stopping = stop
        backoff = self._settings.retry_backoff_s
        try:
            while not stop.is_set():
                lock_conn = await self._acquire(stop)
                if lock_conn is None:
                    break
                failed = True
                led_since = time.monotonic()
                try:
                    await self._lead(lock_conn, stop)
                    failed = False
                except LeadershipLost as exc:
                    log.warning("outbox relay lost its lock connection; stepping down", extra={"error": str(exc)})
                except KafkaError as exc:
                    log.warning(
                        "outbox relay cannot reach Kafka; stepping down",
                        extra={"error": scrub_text(str(exc)), "retry_in_s": backoff},
                    )
                except Exception:
                    log.exception("outbox relay failed while leading; stepping down")
                finally:
                    # Release the lock before any backoff, so a healthy instance can take over.
                    await self._step_down(lock_conn)
                if failed and time.monotonic() - led_since > self._settings.retry_backoff_max_s:
                    backoff = self._settings.retry_backoff_s  # it had led well: a fresh failure, not a streak
                if failed:
                    await _sleep_unless(stop, backoff)
                    backoff = min(backoff * 2, self._settings.retry_backoff_max_s)
                else:
                    backoff = self._settings.retry_backoff_s
        finally:
            self._connected = False
            self._stopping = None

    async def _acquire(self, stop: asyncio.Event) -> psycopg.AsyncConnection[Any] | None:
        """Open the dedicated lock connection and wait until the advisory lock is ours (None if stopped)."""
        settings = self._settings
        backoff = settings.retry_backoff_s
        waiting_logged = False
        while not stop.is_set():
            conn: psycopg.AsyncConnection[Any] | None = None
            leading = False
            try:
                conn = await self._connect(autocommit=False)
                self._connected = True
                backoff = settings.retry_backoff_s
                while not stop.is_set():
                    # The transaction stays open while this relay leads: it holds the lock (docstring).
                    # Should this relay be cut off, the server ends the idle transaction, hence the lock,
                    # after this long: its own TCP keepalives do not reach through a pooler.
                    cursor = await conn.execute(
                        _TRY_LOCK, {"key": LOCK_KEY, "idle_ms": str(self._lock_idle_timeout_ms())}, prepare=False
                    )
                    row = await cursor.fetchone()
                    if row is not None and row.locked:
                        log.info("outbox relay acquired the lock; leading", extra={"pid": os.getpid()})
                        leading = True
                        return conn
                    await conn.rollback()
                    if not waiting_logged:
                        log.info("another outbox relay leads; waiting", extra={"lock_retry_s": settings.lock_retry_s})
                        waiting_logged = True
                    await _sleep_unless(stop, settings.lock_retry_s)
            except (psycopg.Error, OSError) as exc:
                self._connected = False
                log.warning(
                    "outbox relay cannot reach PostgreSQL; retrying",
                    extra={"error": scrub_text(str(exc)), "retry_in_s": backoff},
                )
                await _close_quietly(conn)  # not kept open through the pause
                conn = None
                await _sleep_unless(stop, backoff)
                backoff = min(backoff * 2, settings.retry_backoff_max_s)
            finally:
                if conn is not None and not leading:
                    await _close_quietly(conn)
        return None

    def _lock_idle_timeout_ms(self) -> int:
        """How long the lock's transaction may sit unused: longer than the leader ever goes without a
        check (a batch waits for the broker up to ``request_timeout_s``), twice over."""
        settings = self._settings
        return int(2 * (settings.request_timeout_s + settings.lock_check_s + settings.lock_check_timeout_s) * 1000)

    async def _connect(self, *, autocommit: bool) -> psycopg.AsyncConnection[Any]:
        """A connection of the relay's own (never from a pool). READ COMMITTED whatever the database's
        default: the lock's long transaction must take a fresh snapshot per statement and hold none
        between them, or it would hold back vacuum for as long as the relay leads."""
        conn = await psycopg.AsyncConnection.connect(
            _conninfo(self._url),
            autocommit=autocommit,
            connect_timeout=10,
            application_name=f"{APPLICATION_NAME}:{socket.gethostname()[:24]}:{os.getpid()}",
            # Client and server keepalives: a vanished peer is noticed in ~30 s, so a
            # partitioned leader's session (and lock) does not linger for hours.
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
            options="-c tcp_keepalives_idle=10 -c tcp_keepalives_interval=5 -c tcp_keepalives_count=3",
            row_factory=namedtuple_row,
            prepare_threshold=self._settings.database.prepare_threshold,
        )
        try:
            await conn.set_isolation_level(psycopg.IsolationLevel.READ_COMMITTED)
        except BaseException:
            await _close_quietly(conn)
            raise
        return conn

    async def _step_down(self, lock_conn: psycopg.AsyncConnection[Any]) -> None:
        """Stop the producer and close both connections (closing the lock's ends its transaction and
        releases the lock)."""
        if self._leading:
            log.info("outbox relay stepping down", extra={"pid": os.getpid()})
        self._leading = False
        work, self._conn, self._lock_conn = self._conn, None, None
        OUTBOX_RELAY_LEADER.set(0)
        # Only the leader reports the backlog: a follower's stale numbers would mislead max().
        OUTBOX_BACKLOG.set(0)
        OUTBOX_OLDEST_AGE.set(0)
        try:
            if self._producer is not None:
                producer, self._producer = self._producer, None
                # Sends still in flight here were never marked: they are published again later.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(producer.stop(), timeout=self._settings.stop_timeout_s)
        finally:
            # Even when cancelled (a stop() out of time): an unclosed lock connection would keep the
            # lock, idle in transaction, until the server's timeout ended it.
            self._connected = False
            await _close_quietly(work, lock_conn)

    # ------------------------------------------------------------------ leading

    async def _start_producer(self) -> None:
        settings = self._settings
        self._producer = AIOKafkaProducer(
            **self._kafka.client_options(),
            client_id=f"{self._kafka.client_id}-{self._service}-outbox",
            enable_idempotence=True,
            acks="all",
            linger_ms=5,
            max_request_size=settings.max_record_bytes,
            request_timeout_ms=int(settings.request_timeout_s * 1000),
        )
        await self._producer.start()
        self._producer_suspect = False

    async def _renew_producer(self) -> bool:
        """A new producer after a broker failure. Seen in the chaos test: after a broker restart the
        old producer timed out on one partition's rows for minutes while it published the others
        (its idempotent sequence for that partition never recovered), so a message waited unsent.
        The rows it held were never marked: the new producer publishes them (at least once)."""
        old, self._producer = self._producer, None
        if old is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(old.stop(), timeout=self._settings.stop_timeout_s)
        try:
            await self._start_producer()
        except (KafkaError, OSError, TimeoutError) as exc:
            self._producer = None  # still suspect: tried again after the pause
            log.warning("outbox relay producer cannot start yet", extra={"error": scrub_text(str(exc))[:200]})
            return False
        log.info("outbox relay producer renewed after a broker failure")
        return True

    async def _lead(self, lock_conn: psycopg.AsyncConnection[Any], stop: asyncio.Event) -> None:
        settings = self._settings
        self._lock_conn = lock_conn
        try:
            self._conn = await self._connect(autocommit=True)
        except (psycopg.Error, OSError) as exc:
            raise LeadershipLost(scrub_text(str(exc)) or type(exc).__name__) from exc
        await self._start_producer()
        self._leading = True
        self._holds = _Holds()
        OUTBOX_RELAY_LEADER.set(1)
        now = time.monotonic()
        self._next_metrics = now
        self._next_prune = now
        self._next_lock_check = now + settings.lock_check_s
        idle = settings.idle_poll_min_s
        while not stop.is_set():
            now = time.monotonic()
            if now >= self._next_lock_check:
                await self._check_lock(lock_conn)
            if now < self._holds.paused_until:
                await _sleep_unless(stop, min(self._holds.paused_until - now, settings.lock_check_s))
                continue
            if self._producer_suspect and not await self._renew_producer():
                self._holds.broker_streak += 1
                self._holds.paused_until = time.monotonic() + self._backoff(self._holds.broker_streak)
                continue
            result = await self.publish_batch()
            # On schedule; and when idle with a backlog last seen, every second, so a drained
            # outbox shows as 0 promptly and rows held back show their age growing.
            due = now >= self._next_metrics
            if result.fetched == 0 and self._last_backlog:
                due = due or now >= self._next_metrics - settings.metrics_interval_s + 1.0
            if due:
                await self.refresh_metrics()
                self._next_metrics = time.monotonic() + settings.metrics_interval_s
            if time.monotonic() >= self._next_prune:
                await self._prune_step()
            if result.fetched:
                idle = settings.idle_poll_min_s
                continue
            if await self._pause(stop, idle):
                idle = settings.idle_poll_min_s
            else:
                idle = min(idle * 2, settings.idle_poll_max_s)

    async def _pause(self, stop: asyncio.Event, seconds: float) -> bool:
        """The idle pause, ended early by ``stop`` or ``wake()``; True when woken."""
        woken = self._woken
        if not woken.is_set():
            waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(woken.wait())]
            _, pending = await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
            for wait in pending:
                wait.cancel()
        was_woken = woken.is_set()
        woken.clear()
        return was_woken

    async def _check_lock(self, lock_conn: psycopg.AsyncConnection[Any]) -> None:
        """A round trip in the lock's transaction: if it fails, the lock may be someone else's. Its
        statement runs in the transaction that holds the lock, so an answer proves the lock is ours."""
        if lock_conn.info.transaction_status != TransactionStatus.INTRANS:
            # Ended (or failed): a SELECT now would begin a new transaction, without the lock.
            raise LeadershipLost(f"the lock's transaction is {lock_conn.info.transaction_status.name}")
        try:
            await asyncio.wait_for(
                lock_conn.execute("SELECT 1", prepare=False), timeout=self._settings.lock_check_timeout_s
            )
        except (psycopg.Error, OSError, TimeoutError) as exc:
            raise LeadershipLost(scrub_text(str(exc)) or type(exc).__name__) from exc
        self._next_lock_check = time.monotonic() + self._settings.lock_check_s

    async def _db(self, statement: str, params: dict[str, Any]) -> _Result:
        """One statement on the leader's statement connection (autocommit). Raw psycopg, no pool and
        no transaction around a single statement: the relay runs the same few statements back to
        back, and SQLAlchemy's engine and transaction cost several times their work
        (docs/benchmarks.md "End to end")."""
        conn = self._conn
        if conn is None:
            raise LeadershipLost("not leading")
        try:
            cursor = await conn.execute(statement, params)
            rows = await cursor.fetchall() if cursor.description is not None else []
        except (psycopg.OperationalError, OSError) as exc:
            raise LeadershipLost(scrub_text(str(exc)) or type(exc).__name__) from exc
        return _Result(rows, cursor.rowcount)

    async def _fetch(self) -> list[OutboxRow]:
        holds = self._holds
        holds.expire(time.monotonic())
        keyed = [k for k in holds.keys if isinstance(k, tuple)]
        result = await self._db(
            _FETCH,
            {
                "held_topics": list(holds.topics),
                "held_ids": [k for k in holds.keys if isinstance(k, int)],
                "held_key_topics": [k[0] for k in keyed],
                "held_keys": [k[1] for k in keyed],
                "limit": self._settings.batch_size,
                "max_bytes": self._settings.max_batch_bytes,
            },
        )
        return [
            OutboxRow(
                id=r.id,
                topic=r.topic,
                key=bytes(r.key) if r.key is not None else None,
                payload=bytes(r.payload),
                headers=dict(r.headers or {}),
                attempts=r.attempts,
                created_at=r.created_at,
            )
            for r in result.rows
        ]

    async def _unavailable_topics(self, rows: Sequence[OutboxRow]) -> dict[str, Failure] | None:
        """Topics of this batch whose metadata cannot be had quickly (missing, forbidden); None if stopped.

        Asked concurrently and abandoned when the relay is told to stop, so a missing topic
        delays neither the other topics nor a shutdown by more than ``metadata_timeout_s``.
        """
        names = sorted(topic for topic in {row.topic for row in rows} if _known(topic))
        checks = asyncio.ensure_future(asyncio.gather(*(self._topic_failure(name) for name in names)))
        waiters: set[asyncio.Future[Any]] = {checks}
        if self._stopping is not None:
            waiters.add(asyncio.ensure_future(self._stopping.wait()))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters - {checks}:
                waiter.cancel()
        if not checks.done():
            checks.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await checks
            return None
        return {name: failure for name, failure in zip(names, checks.result(), strict=True) if failure is not None}

    async def _topic_failure(self, name: str) -> Failure | None:
        physical = topic_named(name).physical_name(self._kafka)
        try:
            await asyncio.wait_for(self._producer.partitions_for(physical), self._settings.metadata_timeout_s)
        except TimeoutError:
            return Failure(FailureKind.TOPIC, "topic_unavailable", f"no metadata for topic {physical} (does it exist?)")
        except Exception as exc:
            failure = classify(exc)
            return Failure(FailureKind.TOPIC, failure.code, failure.message)
        return None

    async def publish_batch(self) -> BatchResult:
        """Fetch pending rows, send them in id order, mark what the broker acknowledged; handle failures."""
        rows = await self._fetch()
        result = BatchResult(fetched=len(rows))
        if not rows:
            return result
        if self._lock_conn is not None:
            # Still the leader before anything is sent: a relay that lost its lock sends nothing more,
            # so two relays never publish the same keys batch after batch (at most the batch in hand).
            await self._check_lock(self._lock_conn)
        unavailable = await self._unavailable_topics(rows)
        if unavailable is None:
            return BatchResult()  # stopping: nothing was sent
        blocked: set[tuple[str, bytes] | int] = set()
        failures: list[tuple[OutboxRow, Failure]] = []
        in_flight: list[tuple[OutboxRow, Awaitable[Any]]] = []
        for row in rows:
            if row.order_key in blocked:
                continue
            if row.topic in unavailable:
                failures.append((row, unavailable[row.topic]))
                blocked.add(row.order_key)
                continue
            try:
                try:
                    spec = topic_named(row.topic)
                except KeyError:
                    raise UnknownTopicName(f"topic {row.topic!r} is not in the registry") from None
                future = await self._producer.send(
                    spec.physical_name(self._kafka), value=row.payload, key=row.key, headers=kafka_headers(row.headers)
                )
            except Exception as exc:
                failures.append((row, classify(exc)))
                blocked.add(row.order_key)
                continue
            in_flight.append((row, future))
        acks = await asyncio.gather(*(future for _, future in in_flight), return_exceptions=True)
        published: list[OutboxRow] = []
        failed_at: dict[tuple[str, bytes] | int, int] = {}
        for (row, _), ack in zip(in_flight, acks, strict=True):
            if isinstance(ack, BaseException):
                failures.append((row, classify(ack)))
                failed_at.setdefault(row.order_key, row.id)
                continue
            if row.order_key in failed_at:
                # The broker refused an earlier row of this key after this one was already in
                # flight. Unavoidable with pipelining; never silent.
                OUTBOX_ORDER_BROKEN.labels(topic=row.topic).inc()
                log.error(
                    "outbox key order broken: a later row was published after an earlier one failed",
                    extra={"outbox_id": row.id, "failed_outbox_id": failed_at[row.order_key], "topic": row.topic},
                )
            published.append(row)
        if published:
            await self._db(_MARK_PUBLISHED, {"ids": [row.id for row in published]})
            self._record_published(published)
        result.published = len(published)
        result.failed = len(failures)
        if failures:
            result.dead_lettered = await self._handle_failures(failures, any_published=bool(published))
        elif published:
            self._holds.broker_streak = 0
        log.debug(
            "outbox batch",
            extra={"fetched": result.fetched, "published": result.published, "failed": result.failed},
        )
        return result

    def _record_published(self, rows: Sequence[OutboxRow]) -> None:
        now = datetime.now(UTC)
        for row in rows:
            self._holds.row_streaks.pop(row.id, None)
            OUTBOX_PUBLISHED.labels(topic=row.topic).inc()
            RECORDS_PRODUCED.labels(self._service, row.topic).inc()
            OUTBOX_PUBLISH_DELAY.observe(max(0.0, (now - row.created_at).total_seconds()))
        for topic in {row.topic for row in rows}:
            self._holds.topic_streaks.pop(topic, None)

    def _backoff(self, streak: int) -> float:
        return float(min(self._settings.retry_backoff_max_s, self._settings.retry_backoff_s * 2 ** max(0, streak - 1)))

    async def _handle_failures(self, failures: Sequence[tuple[OutboxRow, Failure]], *, any_published: bool) -> int:
        """Record each failure; hold its key, topic or the whole relay; dead-letter exhausted rows."""
        holds = self._holds
        now = time.monotonic()
        dead = 0
        by_error: dict[str, list[int]] = {}
        broker_failed = False
        for row, failure in failures:
            OUTBOX_PUBLISH_FAILURES.labels(topic=_label(row.topic), error_code=failure.code).inc()
            context = {
                "outbox_id": row.id,
                "topic": row.topic,
                "event_id": row.event_id,
                "error_code": failure.code,
                "error": failure.message,
            }
            if failure.kind is FailureKind.RECORD:
                attempts = await self._count_attempt(row, failure)
                if attempts is None:
                    continue  # published meanwhile by someone else
                if attempts >= self._settings.max_attempts and await self._dead_letter(row, failure, attempts):
                    dead += 1
                    continue
                streak = holds.row_streaks[row.id] = holds.row_streaks.get(row.id, 0) + 1
                holds.keys[row.order_key] = now + self._backoff(streak)
                log.warning("outbox row failed; its key waits", extra={**context, "attempts": attempts})
                continue
            by_error.setdefault(failure.message, []).append(row.id)
            if failure.kind is FailureKind.TOPIC:
                if row.topic not in holds.topics:
                    streak = holds.topic_streaks[row.topic] = holds.topic_streaks.get(row.topic, 0) + 1
                    holds.topics[row.topic] = now + self._backoff(streak)
                    log.warning(
                        "outbox topic unavailable; its rows wait",
                        extra={**context, "retry_in_s": self._backoff(streak)},
                    )
            else:
                broker_failed = True
                self._producer_suspect = True
                streak = holds.row_streaks[row.id] = holds.row_streaks.get(row.id, 0) + 1
                holds.keys[row.order_key] = now + self._backoff(streak)
        for message, ids in by_error.items():
            await self._db(_NOTE_ERROR, {"error": message, "ids": ids})
        if broker_failed and not any_published:
            holds.broker_streak += 1
            pause = self._backoff(holds.broker_streak)
            holds.paused_until = now + pause
            log.warning("outbox relay cannot publish; pausing", extra={"retry_in_s": pause, "rows": len(failures)})
        return dead

    async def _count_attempt(self, row: OutboxRow, failure: Failure) -> int | None:
        result = await self._db(_COUNT_ATTEMPT, {"id": row.id, "error": f"{failure.code}: {failure.message}"})
        return int(result.rows[0].attempts) if result.rows else None

    async def _dead_letter(self, row: OutboxRow, failure: Failure, attempts: int) -> bool:
        """Publish ``row`` to the dead-letter topic and mark it; False if that failed (retried later)."""
        letter = DeadLetter(
            original_topic=f"{self._kafka.topic_prefix}{row.topic}",
            # The row never reached a partition; the outbox id is in the dlq.outbox_id header.
            original_partition=-1,
            original_offset=-1,
            original_timestamp=row.created_at,
            original_key=row.key,
            original_value=row.payload,
            original_headers=tuple(Header(key=k, value=v) for k, v in kafka_headers(row.headers)),
            error_code=failure.code,
            error_message=f"outbox row {row.id}: {failure.message}",
            failed_at=datetime.now(UTC),
            service=self._service,
            consumer_group=None,
            attempts=attempts,
        )
        headers = [
            ("dlq.original_topic", letter.original_topic.encode()),
            ("dlq.outbox_id", str(row.id).encode()),
            ("dlq.error_code", failure.code.encode()),
            ("dlq.service", self._service.encode()),
        ]
        try:
            try:
                await self._send_dead_letter(letter, headers)
            except SIZE_ERRORS:
                # Too big to carry along: the bytes stay in the outbox row (kept until
                # dead_letter_retention) for an operator to inspect or replay.
                letter = letter.model_copy(update={"original_value": None})
                await self._send_dead_letter(letter, [*headers, ("dlq.value_omitted", b"true")])
        except Exception as exc:
            log.error(
                "outbox row could not be dead-lettered; retrying later",
                extra={"outbox_id": row.id, "topic": row.topic, "error": scrub_text(str(exc))},
            )
            self._holds.keys[row.order_key] = time.monotonic() + self._backoff(self._holds.row_streaks.get(row.id, 1))
            return False
        await self._db(_MARK_DEAD, {"id": row.id})
        self._holds.row_streaks.pop(row.id, None)
        RECORDS_DEAD_LETTERED.labels(self._service, _label(row.topic), failure.code).inc()
        log.error(
            "outbox row dead-lettered; later rows of its key go on",
            extra={
                "outbox_id": row.id,
                "topic": row.topic,
                "event_id": row.event_id,
                "error_code": failure.code,
                "attempts": attempts,
            },
        )
        return True

    async def _send_dead_letter(self, letter: DeadLetter, headers: list[tuple[str, bytes]]) -> None:
        topic = Topics.DEAD_LETTER
        future = await self._producer.send(
            topic.physical_name(self._kafka),
            key=encode_key(topic, letter),
            value=self._serde.encode(topic, letter),
            headers=headers,
        )
        await future
        RECORDS_PRODUCED.labels(self._service, topic.name).inc()

    # ------------------------------------------------------------------ metrics and pruning

    async def refresh_metrics(self) -> None:
        """Set the backlog gauges from the table (any instance may call it; the leader does periodically)."""
        row = (await self._db(_BACKLOG, {})).rows[0]
        self._last_backlog = int(row.pending)
        OUTBOX_BACKLOG.set(row.pending)
        OUTBOX_OLDEST_AGE.set(float(row.oldest_age_s or 0.0))
        OUTBOX_DEAD_LETTERED_ROWS.set(row.dead_lettered)

    async def _prune_step(self) -> None:
        """Delete one small batch of expired rows; come back soon if there were more."""
        settings = self._settings
        limit = settings.prune_batch_size
        published = (
            await self._db(_PRUNE_PUBLISHED, {"age_s": settings.retention.total_seconds(), "limit": limit})
        ).rowcount
        dead = (
            await self._db(_PRUNE_DEAD, {"age_s": settings.dead_letter_retention.total_seconds(), "limit": limit})
        ).rowcount
        if published:
            OUTBOX_PRUNED.labels(state="published").inc(published)
        if dead:
            OUTBOX_PRUNED.labels(state="dead_lettered").inc(dead)
        if published or dead:
            log.info("outbox pruned", extra={"published_rows": published, "dead_lettered_rows": dead})
        more = published >= limit or dead >= limit
        self._next_prune = time.monotonic() + (0 if more else settings.prune_interval_s)


def _known(topic: str) -> bool:
    try:
        topic_named(topic)
    except KeyError:
        return False
    return True


def _label(topic: str) -> str:
    """A metric label for a topic name: registered names only, so a bad row cannot add series."""
    try:
        return topic_named(topic).name
    except KeyError:
        return "unknown"
