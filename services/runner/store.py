"""Everything the runner writes to and reads from PostgreSQL — the run's system of record.

Every method is one short tenant transaction (``async_tenant_transaction``):
row-level security scopes it to the run's org, and every query filters by org
as well. Events derived from a row change (``run_started``, ``run_completed``,
``handoff_triggered``) are enqueued in the transactional outbox in the same
transaction, after locking the conversation row so outbox ids follow commit
order per conversation (``switchboard.db.outbox``).

The run row is inserted ``running`` by the claim, with ``run_started`` in the outbox, and
gets a terminal status with ``run_completed``. The trace (``tool_calls``) and running
totals are appended after every step but the last, whose entries the terminal
transaction writes. A one-step run costs two transactions: the claim (subject, history,
the context preloads, the row, ``run_started``, the credential) and the finish.
(``pending`` stays in the vocabulary, and counts as active, but the runner no longer writes
it: claim and start were two transactions until the end-to-end bench showed what each costs.)
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Generic, TypeVar

from sqlalchemy import Row, TextClause, bindparam, select, text, update
from sqlalchemy.dialects.postgresql import UUID as PG_UUID
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session

from services.runner.attachments import model_text
from services.runner.budget import ModelPrice
from services.runner.label_filter import CLASSIFICATION_MISMATCH, redispatches
from services.runner.outcome import RUNNER_SHUTDOWN, Classification, LoopOutcome, RunFailure
from services.runner.preload import MISSING, Preload
from services.runner.providers.base import TokenUsage
from services.runner.subject import ConversationInfo, HistoryItem, RunSubject, VersionConfig
from services.runner.superseded import withdraw_lost_attempt
from switchboard.contracts import (
    Action,
    HandoffTriggered,
    RunCompleted,
    RunRequested,
    RunStarted,
    SendTarget,
    Serde,
    Topics,
)
from switchboard.contracts.enums import RunStatus
from switchboard.db.enums import ACTIVE_RUN_STATUSES, ConversationStatus, CredentialValidation
from switchboard.db.models import (
    AiAgent,
    AiAgentRun,
    AiAgentVersion,
    AiModel,
    AiProviderCredential,
)
from switchboard.db.outbox import enqueue_record
from switchboard.db.session import async_tenant_transaction
from switchboard.db.usage import record_usage
from switchboard.run_outcomes import WITHDRAWN_RUN_LOST

_ACTIVE = [s.value for s in ACTIVE_RUN_STATUSES]
# The error code of a run closed because its runner was gone (its usage counted by that closing).
LOST_ERROR_CODE = "process_lost"
HANDED_BACK_MESSAGE = "the run stopped before it finished; handed back for recovery"
_ACTIVE_SQL = ", ".join(f"'{status}'" for status in _ACTIVE)
_UUID = PG_UUID(as_uuid=True)

# The hot statements of a run, as SQL compiled once: built with the ORM per call, their
# construction and cache-key work cost more than their execution (docs/benchmarks.md).
# ON CONFLICT DO NOTHING without a target also covers the partial unique index "one active
# run per conversation": no exception, just no row.
_INSERT_RUNNING = text(
    """
INSERT INTO ai_agent_runs (id, org_id, agent_id, agent_version_id, conversation_id, contact_id, channel_session_id,
                           inbound_message_id, inbound_message_ids, status, provider, model, started_at, wake_reason,
                           wake_context, attempt, parent_run_id, is_dry_run, heartbeat_at)
VALUES (:id, :org_id, :agent_id, :agent_version_id, :conversation_id, :contact_id, :channel_session_id,
        :inbound_message_id, CAST(:inbound_message_ids AS uuid[]), :status, :provider, :model, :started_at,
        :wake_reason, CAST(:wake_context AS jsonb), :attempt, :parent_run_id, :is_dry_run, :heartbeat_at)
ON CONFLICT DO NOTHING
RETURNING id
"""
).bindparams(
    *(
        bindparam(name, type_=_UUID)
        for name in (
            "id",
            "org_id",
            "agent_id",
            "agent_version_id",
            "conversation_id",
            "contact_id",
            "channel_session_id",
            "inbound_message_id",
            "parent_run_id",
        )
    )
)
# Only a row still active is closed: one closed as lost by a newer attempt stays as it is.
_CLOSE_RUN = text(
    f"""
UPDATE ai_agent_runs SET
    status = :status, vitality = :vitality, error_family = :error_family, abort_reason = :abort_reason,
    error_code = :error_code, error_message = :error_message, provider = :provider, model = :model,
    tokens_in = :tokens_in, tokens_out = :tokens_out, cost_micros = :cost_micros, latency_ms = :latency_ms,
    steps_count = :steps_count, final_text = :final_text, summary = :summary,
    would_send_to = CAST(:would_send_to AS jsonb), actions_executed = CAST(:actions_executed AS jsonb),
    actions_proposed = CAST(:actions_proposed AS jsonb), started_at = :started_at, completed_at = :completed_at,
    inbound_message_ids = inbound_message_ids || CAST(:steered AS uuid[]),
    tool_calls = tool_calls || CAST(:trace_tail AS jsonb),
    prompt = coalesce(CAST(:prompt AS jsonb), prompt),
    updated_at = now()
WHERE org_id = :org_id AND id = :run_id AND status IN ({_ACTIVE_SQL})
RETURNING id
"""
).bindparams(bindparam("org_id", type_=_UUID), bindparam("run_id", type_=_UUID))
# FOR NO KEY UPDATE: serializes the conversation's outbox writers (the webhook's upsert takes the
# same lock) without blocking the foreign-key checks of rows that reference it.
_LOCK_CONVERSATION = text(
    "SELECT c.status, ct.erased_at IS NOT NULL AS contact_erased FROM conversations AS c"
    " LEFT JOIN contacts AS ct ON ct.org_id = c.org_id AND ct.id = c.contact_id"
    " WHERE c.org_id = :org_id AND c.id = :conversation_id FOR NO KEY UPDATE OF c"
).bindparams(bindparam("org_id", type_=_UUID), bindparam("conversation_id", type_=_UUID))
PRICE_CACHE_S = 300.0
T = TypeVar("T")


class ClaimState(StrEnum):
    CREATED = "created"  # the row is ours, running
    DUPLICATE = "duplicate"  # this run id already exists (redelivery): nothing to do
    BUSY = "busy"  # another live run holds the conversation: wait and retry


@dataclass(frozen=True, slots=True)
class StartPlan(Generic[T]):
    """How a claimed run starts, decided on its subject inside the claim transaction: the
    provider and model recorded on the row, and ``resolve`` (the credential lookup, which
    needs the tenant) run on a sync session of that transaction; None: nothing to resolve."""

    provider: str
    model: str
    started_at: datetime
    resolve: Callable[[Session], T] | None = None


@dataclass(frozen=True, slots=True)
class Claim(Generic[T]):
    state: ClaimState
    subject: RunSubject | None = None
    busy_run_id: uuid.UUID | None = None
    existing_status: str | None = None
    # A recovery attempt whose messages another run of the conversation already answered.
    answered_by: uuid.UUID | None = None
    # The conversation was ``handoff`` (people own it) when the run was claimed: not to be run.
    with_humans: bool = False
    # The conversation's contact was erased (the run was requested before): not to be run.
    contact_erased: bool = False
    # CREATED: what the start plan's resolver returned.
    resolved: T | None = None


@dataclass(frozen=True, slots=True)
class Finish:
    """Everything the terminal transaction writes."""

    outcome: LoopOutcome
    classification: Classification
    provider: str
    model: str
    started_at: datetime
    completed_at: datetime
    latency_ms: int
    would_send_to: SendTarget | None
    actions_executed: tuple[Action, ...] = ()
    actions_proposed: tuple[Action, ...] = ()
    invalid_credential_id: uuid.UUID | None = None
    # The IV of the sealing the run used: a key replaced since (a PATCH) is not the one rejected.
    invalid_credential_iv: bytes | None = None
    # The trace entries no append wrote (the last step's), and the prompt if none wrote it either.
    trace_tail: Sequence[dict[str, Any]] = ()
    prompt: dict[str, Any] | None = None
    # Steered messages taken in at a turn boundary (answered by this run too).
    steered_message_ids: tuple[uuid.UUID, ...] = ()


# The columns of ``ai_agent_versions`` a run uses: VersionConfig's fields, by name.
_VERSION_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(VersionConfig))
_TUPLE_COLUMNS = frozenset({"tool_ids", "handoff_keywords", "skills", "subagent_ids"})


def _version_value(name: str, value: Any) -> Any:
    if name in _TUPLE_COLUMNS:
        return tuple(value or ())
    if name == "followup":
        return dict(value or {})
    return value


def _version_config(row: AiAgentVersion) -> VersionConfig:
    return VersionConfig(**{name: _version_value(name, getattr(row, name)) for name in _VERSION_COLUMNS})


def _subject_query(preloads: Sequence[Preload]) -> TextClause:
    """What a claim reads, in one statement: the run id's status (a redelivery), the version, the
    agent's name, the conversation and its contact, which of the request's messages exist, the
    recent history (one more message than the window needs, so the context knows whether older
    ones exist), and one column per preload (services/runner/preload.py)."""
    version = ", ".join(f"v.{name} AS v_{name}" for name in _VERSION_COLUMNS)
    extra = "".join(f",\n    ({preload.sql}) AS preload_{index}" for index, preload in enumerate(preloads))
    return text(
        f"""
SELECT
    (SELECT r.status FROM ai_agent_runs AS r WHERE r.org_id = :org_id AND r.id = :run_id) AS existing_status,
    {version},
    a.name AS agent_name,
    c.id AS c_id, c.chat_id AS c_chat_id, c.channel_session_id AS c_channel_session_id, c.summary AS c_summary,
    cs.through_occurred_at AS c_summary_through_at, cs.through_message_id AS c_summary_through_id,
    ct.display_name AS contact_name,
    ARRAY(SELECT m.id FROM messages AS m
          WHERE m.org_id = :org_id AND m.id = ANY(CAST(:message_ids AS uuid[]))) AS known_message_ids,
    CASE WHEN c.id IS NOT NULL AND v.history_message_window > 0 THEN (
        SELECT json_agg(json_build_array(h.id, h.direction, h.body, h.occurred_at, h.content_type)
                        ORDER BY h.occurred_at DESC)
        FROM (SELECT m.id, m.direction, m.body, m.occurred_at, m.content_type FROM messages AS m
              WHERE m.org_id = :org_id AND m.conversation_id = c.id AND (m.body <> '' OR m.content_type <> 'text')
                AND m.delivery_error IS DISTINCT FROM '{WITHDRAWN_RUN_LOST}'
              ORDER BY m.occurred_at DESC
              LIMIT v.history_message_window + :message_count + 1) AS h
    ) END AS history{extra}
FROM ai_agent_versions AS v
LEFT JOIN ai_agents AS a ON a.org_id = v.org_id AND a.id = :agent_id
LEFT JOIN conversations AS c ON c.org_id = v.org_id AND c.id = :conversation_id
LEFT JOIN contacts AS ct ON ct.org_id = c.org_id AND ct.id = c.contact_id
LEFT JOIN conversation_summaries AS cs ON cs.org_id = c.org_id AND cs.conversation_id = c.id
WHERE v.org_id = :org_id AND v.id = :version_id
"""
    )


@dataclass(frozen=True, slots=True)
class _Loaded:
    """What the claim's subject query returned."""

    existing_status: str | None
    subject: RunSubject
    known_message_ids: frozenset[uuid.UUID]


class RunStore:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        serde: Serde,
        *,
        runner_id: str,
        preloads: Sequence[Preload] = (),
    ) -> None:
        self._sessions = sessions
        self._serde = serde
        self._runner_id = runner_id
        self._preloads = tuple(preloads)
        self._subject_sql = _subject_query(self._preloads)
        self._prices: dict[tuple[str, str], tuple[float, ModelPrice]] = {}

    # ------------------------------------------------------------------ taking a run

    async def claim(
        self, request: RunRequested, *, stale_after_s: float, plan: Callable[[RunSubject], StartPlan[T]]
    ) -> Claim[T]:
        """Take the run and start it, in one transaction: load its subject, insert the row as
        ``running`` (``plan`` decides provider, model and what to resolve), run the preloads,
        enqueue ``run_started`` and run the plan's resolver.

        A run whose conversation is held by another active run: if that run is this
        run's parent (recovery) or its heartbeat is older than ``stale_after_s``, its
        runner is gone — it is closed as ``processLost`` and the claim retried once;
        otherwise the claim reports BUSY and the caller waits.
        """
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            loaded = await self._load(session, request)
            if loaded.existing_status is not None:
                return Claim(ClaimState.DUPLICATE, existing_status=loaded.existing_status)
            subject = loaded.subject
            # Locked before the start time is taken: a run of this conversation that is finishing holds
            # the lock until its terminal commit, so this run starts after that one ended — in the
            # row's timestamps too (the chaos test checks no two runs of a conversation overlap).
            # Read under the lock a takeover takes too: a person who took the conversation over
            # before this claim is seen here, one who does it after interrupts the run (steering).
            status, contact_erased = await self._lock_conversation(session, request)
            with_humans = status == ConversationStatus.HANDOFF.value and not request.dry_run
            for _ in range(2):
                start = plan(subject)  # after a lost run was closed below, so it starts after that end
                if await self._insert_running(session, request, loaded, start):
                    answered_by = await self._answered_by(session, request)
                    if answered_by is None:  # a recovery attempt that will run the turn again
                        withdrawn = await withdraw_lost_attempt(session, self._serde, request)
                        if withdrawn.message_ids:  # never said: the history is read again without them
                            reloaded = (await self._load(session, request)).subject
                            subject = replace(subject, recent_messages=reloaded.recent_messages)
                    resolved = await self._start(session, subject, start)
                    return Claim(
                        ClaimState.CREATED,
                        subject=subject,
                        answered_by=answered_by,
                        with_humans=with_humans,
                        contact_erased=contact_erased,
                        resolved=resolved,
                    )
                busy = await self._active_run(session, request)
                if busy is None:
                    continue  # it ended between the two statements
                busy_id, heartbeat = busy
                stale = heartbeat is None or heartbeat < datetime.now(UTC) - timedelta(seconds=stale_after_s)
                if busy_id != request.parent_run_id and not stale:
                    return Claim(ClaimState.BUSY, busy_run_id=busy_id)
                await self._close_lost(session, request.org_id, busy_id)
            return Claim(ClaimState.BUSY, busy_run_id=None)

    async def _start(self, session: AsyncSession, subject: RunSubject, start: StartPlan[T]) -> T | None:
        """``run_started`` (the conversation is locked since the claim began) and the plan's resolver."""
        request = subject.request
        record = RunStarted(
            org_id=request.org_id,
            request_id=request.request_id,
            conversation_id=request.conversation_id,
            run_id=request.run_id,
            agent_id=request.agent_id,
            version_id=request.version_id,
            attempt=request.attempt,
            parent_run_id=request.parent_run_id,
            wake_reason=request.wake_reason,
            provider=start.provider,
            model=start.model,
            runner_id=self._runner_id,
            started_at=start.started_at,
            dry_run=request.dry_run,
        )
        await session.run_sync(enqueue_record, Topics.RUN_STARTED, record, serde=self._serde)
        return await session.run_sync(start.resolve) if start.resolve is not None else None

    async def _answered_by(self, session: AsyncSession, request: RunRequested) -> uuid.UUID | None:
        """For a recovery attempt: a run of the conversation that already answered all its messages.

        The lease can expire while a finished run's ``run_completed`` is still on its way (a broker
        or dispatcher outage longer than the lease); the re-dispatched attempt must then not answer
        the customer a second time (docs/runner.md, "One reply per message")."""
        message_ids = [m.message_id for m in request.messages]
        if request.parent_run_id is None or not message_ids:
            return None
        answered: uuid.UUID | None = await session.scalar(
            select(AiAgentRun.id)
            .where(
                AiAgentRun.org_id == request.org_id,
                AiAgentRun.conversation_id == request.conversation_id,
                AiAgentRun.id != request.run_id,
                AiAgentRun.is_dry_run.is_(False),
                AiAgentRun.status.in_([RunStatus.COMPLETED.value, RunStatus.HANDOFF.value]),
                AiAgentRun.inbound_message_ids.contains(message_ids),
            )
            .limit(1)
        )
        return answered

    async def _insert_running(
        self, session: AsyncSession, request: RunRequested, loaded: _Loaded, start: StartPlan[Any]
    ) -> bool:
        if request.parent_run_id is not None:
            await self._record_unclaimed_parent(session, request)
        known = loaded.known_message_ids
        message_ids = [m.message_id for m in request.messages if m.message_id in known]
        has_conversation = loaded.subject.conversation is not None
        values = {
            "id": request.run_id,
            "org_id": request.org_id,
            "agent_id": request.agent_id,
            "agent_version_id": request.version_id,
            "conversation_id": request.conversation_id if has_conversation else None,
            "contact_id": request.contact_id if has_conversation else None,
            "channel_session_id": request.channel_session_id if has_conversation else None,
            "inbound_message_id": message_ids[0] if message_ids else None,
            "inbound_message_ids": message_ids,
            "status": RunStatus.RUNNING.value,
            "provider": start.provider,
            "model": start.model,
            "started_at": start.started_at,
            "wake_reason": request.wake_reason.value,
            "wake_context": request.wake_context.model_dump(mode="json", exclude_none=True),
            "attempt": request.attempt,
            "parent_run_id": request.parent_run_id,
            "is_dry_run": request.dry_run,
            "heartbeat_at": start.started_at,
        }
        values["wake_context"] = json.dumps(values["wake_context"])
        inserted = await session.scalar(_INSERT_RUNNING, values)
        return inserted is not None

    async def _record_unclaimed_parent(self, session: AsyncSession, request: RunRequested) -> None:
        """A recovered attempt whose parent never got a row (lost before any runner claimed it, or its
        lease expired while partitions moved): record the parent as lost, so the lineage holds (the
        foreign key) and a late delivery of the parent finds its id taken and is skipped."""
        assert request.parent_run_id is not None
        await session.execute(
            insert(AiAgentRun)
            .values(
                id=request.parent_run_id,
                org_id=request.org_id,
                agent_id=request.agent_id,
                agent_version_id=request.version_id,
                conversation_id=request.conversation_id,
                status=RunStatus.FAILED.value,
                vitality="dead",
                error_family="processLost",
                error_code=LOST_ERROR_CODE,
                error_message="lost before any runner took it; a new attempt took over",
                # Its own wake reason is unknown here: recovery for a retry, else the column default.
                **({"wake_reason": request.wake_reason.value} if request.attempt > 2 else {}),
                attempt=max(1, request.attempt - 1),
                is_dry_run=request.dry_run,
                completed_at=datetime.now(UTC),
            )
            .on_conflict_do_nothing()
        )

    async def _active_run(
        self, session: AsyncSession, request: RunRequested
    ) -> tuple[uuid.UUID, datetime | None] | None:
        row = (
            await session.execute(
                select(AiAgentRun.id, AiAgentRun.heartbeat_at).where(
                    AiAgentRun.org_id == request.org_id,
                    AiAgentRun.conversation_id == request.conversation_id,
                    AiAgentRun.status.in_(_ACTIVE),
                    AiAgentRun.is_dry_run.is_(False),
                )
            )
        ).one_or_none()
        return None if row is None else (row.id, row.heartbeat_at)

    async def stale_runs(self, *, older_than_s: float, limit: int) -> list[tuple[uuid.UUID, uuid.UUID]]:
        """(org id, run id) of active rows whose heartbeat is older than ``older_than_s``, any org."""
        async with self._sessions() as session, session.begin():
            rows = await session.execute(
                text("SELECT org_id, run_id FROM list_stale_runs(:s, :l)"), {"s": int(older_than_s), "l": limit}
            )
            return [(row.org_id, row.run_id) for row in rows]

    async def close_stale(self, org_id: uuid.UUID, run_id: uuid.UUID) -> None:
        """Close a run whose runner is gone (the sweep: no attempt came to do it), counting its usage."""
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            await self._close_lost(
                session, org_id, run_id, reason="the runner holding this run stopped heartbeating; closed by the sweep"
            )

    async def _close_lost(
        self,
        session: AsyncSession,
        org_id: uuid.UUID,
        run_id: uuid.UUID,
        *,
        reason: str = "the runner holding this run stopped heartbeating; a new attempt took over",
    ) -> None:
        """Close a run whose runner is gone, and put what it spent up to its last recorded step in
        the usage ledger: the provider charged it, and that runner will never finish the run."""
        now = datetime.now(UTC)
        lost = (
            await session.execute(
                update(AiAgentRun)
                .where(AiAgentRun.org_id == org_id, AiAgentRun.id == run_id, AiAgentRun.status.in_(_ACTIVE))
                .values(
                    status=RunStatus.FAILED.value,
                    vitality="dead",
                    error_family="processLost",
                    error_code=LOST_ERROR_CODE,
                    error_message=reason,
                    completed_at=now,
                )
                .returning(AiAgentRun.agent_id, AiAgentRun.tokens_in, AiAgentRun.tokens_out, AiAgentRun.cost_micros)
            )
        ).one_or_none()
        if lost is not None and (lost.tokens_in or lost.tokens_out or lost.cost_micros):
            await session.run_sync(
                lambda s: record_usage(
                    s, org_id, lost.agent_id, now, lost.tokens_in or 0, lost.tokens_out or 0, lost.cost_micros or 0
                )
            )

    async def _load(self, session: AsyncSession, request: RunRequested) -> _Loaded:
        """The run's subject, whether its id is taken, which of its messages exist, and every
        preload's column: one statement (``_subject_query``)."""
        params: dict[str, Any] = {
            "org_id": request.org_id,
            "run_id": request.run_id,
            "agent_id": request.agent_id,
            "version_id": request.version_id,
            "conversation_id": request.conversation_id,
            "contact_id": request.contact_id,
            "message_ids": [m.message_id for m in request.messages],
            "message_count": len(request.messages),
        }
        for preload in self._preloads:
            params.update(preload.params(request))
        row = (await session.execute(self._subject_sql, params)).one_or_none()
        if row is None:  # the foreign keys of the request's rows make this unreachable
            raise LookupError(f"version {request.version_id} not found")
        col = row._mapping
        config = VersionConfig(**{name: _version_value(name, col[f"v_{name}"]) for name in _VERSION_COLUMNS})
        info = None
        if col["c_id"] is not None:
            info = ConversationInfo(
                id=col["c_id"],
                chat_id=col["c_chat_id"],
                channel_session_id=col["c_channel_session_id"],
                contact_name=col["contact_name"],
                summary=col["c_summary"],
                summary_through=(
                    (col["c_summary_through_at"], col["c_summary_through_id"])
                    if col["c_summary_through_at"] is not None
                    else None
                ),
            )
        recent = tuple(
            HistoryItem(uuid.UUID(item_id), direction, model_text(kind, body), datetime.fromisoformat(at))
            for item_id, direction, body, at, kind in col["history"] or ()
        )
        subject = RunSubject(
            request=request,
            agent_name=col["agent_name"] or "agent",
            version=config,
            conversation=info,
            recent_messages=recent,
        )
        values: dict[str, object] = {}
        for index, preload in enumerate(self._preloads):
            value = preload.parse(col[f"preload_{index}"], subject)
            if value is not MISSING:
                values[preload.key] = value
        return _Loaded(
            existing_status=col["existing_status"],
            subject=replace(subject, preloaded=values) if values else subject,
            known_message_ids=frozenset(col["known_message_ids"] or ()),
        )

    # ------------------------------------------------------------------ life cycle

    async def append_trace(
        self,
        request: RunRequested,
        entries: Sequence[dict[str, Any]],
        *,
        steps: int,
        usage: TokenUsage,
        cost: int,
        prompt: dict[str, Any] | None = None,
    ) -> None:
        """``prompt``: the composed prompt (issue 6), written with the first append — no extra transaction.

        Idempotent: an append retried after its COMMIT landed but its answer was lost finds the
        trace already ending with its last entry and appends nothing (entries carry their step,
        call id and timestamps, so two different appends never end alike)."""
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            await session.execute(
                text(
                    "UPDATE ai_agent_runs SET tool_calls = CASE"
                    " WHEN jsonb_array_length(tool_calls) > 0"
                    " AND tool_calls -> -1 = CAST(:entries AS jsonb) -> -1 THEN tool_calls"
                    " ELSE tool_calls || CAST(:entries AS jsonb) END,"
                    # Usage only while the run is active: a row closed as lost keeps what its closing
                    # counted in the ledger (_close_lost), so a late finish counts only the rest.
                    f" steps_count = CASE WHEN status IN ({_ACTIVE_SQL}) THEN :steps ELSE steps_count END,"
                    f" tokens_in = CASE WHEN status IN ({_ACTIVE_SQL}) THEN :tin ELSE tokens_in END,"
                    f" tokens_out = CASE WHEN status IN ({_ACTIVE_SQL}) THEN :tout ELSE tokens_out END,"
                    f" cost_micros = CASE WHEN status IN ({_ACTIVE_SQL}) THEN :cost ELSE cost_micros END,"
                    " prompt = coalesce(CAST(:prompt AS jsonb), prompt),"
                    " heartbeat_at = now(), updated_at = now()"
                    " WHERE org_id = :org AND id = :run"
                ),
                {
                    "prompt": None if prompt is None else json.dumps(prompt, ensure_ascii=False),
                    "entries": json.dumps(list(entries), default=str, ensure_ascii=False),
                    "steps": steps,
                    "tin": usage.all_input,
                    "tout": usage.output_tokens,
                    "cost": cost,
                    "org": request.org_id,
                    "run": request.run_id,
                },
            )

    async def finish(self, subject: RunSubject, finish: Finish) -> bool:
        """The terminal transaction: row, usage counters, credential state, outbox events.

        False, and nothing but the usage written, if the row was no longer active: a newer
        attempt closed it as lost (the dispatcher gave up on this run), so announcing it
        now would answer the customer twice."""
        request = subject.request
        outcome = finish.outcome
        failure = outcome.failure or (outcome.handoff.failure if outcome.handoff else None)
        usage = outcome.usage
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            await self._lock_conversation(session, request)
            closed = await session.scalar(_CLOSE_RUN, _close_values(request, finish, failure))
            if closed is None:
                closing = await _closing(session, request)
                if closing is not None and closing.completed_at == finish.completed_at:
                    # This very finish closed it: a retry whose first COMMIT landed but whose answer
                    # was lost (the connection dropped). Counted and announced already.
                    return True
                if closing is not None and closing.late_finished_at == finish.completed_at:
                    return False  # this late finish, retried after its COMMIT landed: counted already
                await _mark_late_finish(session, request, finish.completed_at)
                await _append_trace_tail(session, request, finish.trace_tail, finish.prompt)
                await _add_uncounted_usage(session, request, closing, usage, outcome.cost_micros, finish.completed_at)
                return False
            if finish.invalid_credential_id is not None:
                await session.execute(
                    update(AiProviderCredential)
                    .where(
                        AiProviderCredential.org_id == request.org_id,
                        AiProviderCredential.id == finish.invalid_credential_id,
                        # A run that loaded the old key gets its 401 after the admin put a new one
                        # in: the new key (validated meanwhile) is not the one rejected.
                        AiProviderCredential.iv == finish.invalid_credential_iv,
                    )
                    .values(
                        validation_status=CredentialValidation.INVALID.value,
                        validation_error="rejected by the provider during a run (invalid or revoked key)",
                        validated_at=finish.completed_at,
                    )
                )
            if finish.outcome.handoff is not None:
                handoff = finish.outcome.handoff
                await session.run_sync(
                    enqueue_record,
                    Topics.HANDOFF_TRIGGERED,
                    HandoffTriggered(
                        org_id=request.org_id,
                        request_id=request.request_id,
                        conversation_id=request.conversation_id,
                        contact_id=request.contact_id,
                        channel_session_id=request.channel_session_id,
                        run_id=request.run_id,
                        agent_id=request.agent_id,
                        version_id=request.version_id,
                        reason=handoff.reason,
                        urgency=handoff.urgency,
                        trigger=handoff.trigger,
                        matched_keyword=handoff.matched_keyword,
                        dry_run=request.dry_run,
                    ),
                    serde=self._serde,
                )
            await session.run_sync(
                enqueue_record, Topics.RUN_COMPLETED, run_completed(subject, finish), serde=self._serde
            )
            if outcome.abort_reason == CLASSIFICATION_MISMATCH and not request.dry_run:
                await self._redispatch(session, request)
            # The usage ledger: an append, no lock shared with the org's other runs (fold_usage).
            await session.run_sync(_add_usage, request, usage, outcome.cost_micros, finish.completed_at)
        return True

    async def hand_back(self, subject: RunSubject, finish: Finish, *, error_code: str = RUNNER_SHUTDOWN) -> None:
        """Shutdown (or a newer attempt of the run arrived): close the row as lost and count its usage.

        At shutdown it is also announced — ``run_completed`` failed / dead / ``processLost``,
        ``runner_shutdown`` — so the dispatcher recovers the messages at once instead of after the
        lease, and billing sees the attempt's usage. A superseded run is not: the newer attempt
        already holds the conversation, and a completion dated after that attempt started would
        read as two overlapping runs. Nor is a row someone else closed first."""
        request = subject.request
        outcome, cls = finish.outcome, finish.classification
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            if error_code == RUNNER_SHUTDOWN:  # it writes the outbox: keep the key's commit order
                await self._lock_conversation(session, request)
            await _append_trace_tail(session, request, finish.trace_tail, finish.prompt)
            handed = await session.scalar(
                update(AiAgentRun)
                .where(
                    AiAgentRun.org_id == request.org_id,
                    AiAgentRun.id == request.run_id,
                    AiAgentRun.status.in_(_ACTIVE),
                )
                .values(
                    status=cls.status.value,
                    vitality=cls.vitality.value,
                    error_family=cls.error_family.value if cls.error_family else None,
                    error_code=error_code,
                    error_message=HANDED_BACK_MESSAGE,
                    tokens_in=outcome.usage.all_input,
                    tokens_out=outcome.usage.output_tokens,
                    cost_micros=outcome.cost_micros,
                    steps_count=outcome.steps,
                    latency_ms=finish.latency_ms,
                    completed_at=finish.completed_at,
                )
                .returning(AiAgentRun.id)
            )
            if handed is not None:
                await session.run_sync(_add_usage, request, outcome.usage, outcome.cost_micros, finish.completed_at)
                if error_code == RUNNER_SHUTDOWN:
                    announced = run_completed(subject, finish).model_copy(
                        update={"error_code": error_code, "error_message": HANDED_BACK_MESSAGE, "would_send_to": None}
                    )
                    await session.run_sync(enqueue_record, Topics.RUN_COMPLETED, announced, serde=self._serde)
            else:  # closed meanwhile (a newer attempt took over): count what that closing did not
                closing = await _closing(session, request)
                await _add_uncounted_usage(
                    session, request, closing, outcome.usage, outcome.cost_micros, finish.completed_at
                )

    # ------------------------------------------------------------------ issue 6 item 9

    async def subagents(
        self, org_id: uuid.UUID, agent_ids: Sequence[uuid.UUID], resolve: Callable[[Session, VersionConfig], T]
    ) -> list[tuple[uuid.UUID, str, VersionConfig, T]]:
        """The published versions of these agents of the org, in the given order (archived or
        unpublished agents are left out), each with ``resolve`` (its credential) run in the same
        transaction (docs/agent-context.md "Sub-agents and classification")."""
        if not agent_ids:
            return []
        found: list[tuple[uuid.UUID, str, VersionConfig, T]] = []
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            rows = (
                await session.execute(
                    select(AiAgent.id, AiAgent.name, AiAgentVersion)
                    .join(AiAgentVersion, AiAgentVersion.id == AiAgent.published_version_id)
                    .where(AiAgent.org_id == org_id, AiAgent.id.in_(list(agent_ids)), AiAgent.archived_at.is_(None))
                )
            ).all()
            for agent_id, name, row in rows:
                config = _version_config(row)
                resolved = await session.run_sync(lambda sync, c=config: resolve(sync, c))  # type: ignore[misc]
                found.append((agent_id, name, config, resolved))
        order = {agent_id: index for index, agent_id in enumerate(agent_ids)}
        return sorted(found, key=lambda item: order[item[0]])

    async def save_classification(self, request: RunRequested, labels: dict[str, Any]) -> None:
        """The inbound message(s)' labels on the run row (``ai_agent_runs.classification``)."""
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            await session.execute(
                update(AiAgentRun)
                .where(AiAgentRun.org_id == request.org_id, AiAgentRun.id == request.run_id)
                .values(classification=labels)
            )

    async def label_filter(self, request: RunRequested) -> dict[str, Any] | None:
        """The version's classification filter (``trigger_config.classification``), None when it has none."""
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            trigger = await session.scalar(
                select(AiAgentVersion.trigger_config).where(
                    AiAgentVersion.org_id == request.org_id, AiAgentVersion.id == request.version_id
                )
            )
        found = (trigger or {}).get("classification")
        return dict(found) if isinstance(found, dict) else None

    async def _redispatch(self, session: AsyncSession, request: RunRequested) -> None:
        """Issue 6 item 9: a classification filter was unmet; the messages go to the next agent, never back
        to one that refused them (every earlier ``classification_mismatch`` run on them is excluded too)."""
        message_ids = [m.message_id for m in request.messages]
        if not message_ids:
            return
        refused = await session.scalars(
            select(AiAgentRun.agent_id).where(
                AiAgentRun.org_id == request.org_id,
                AiAgentRun.conversation_id == request.conversation_id,
                AiAgentRun.abort_reason == CLASSIFICATION_MISMATCH,
                AiAgentRun.inbound_message_ids.overlap(message_ids),
            )
        )
        for record in redispatches(request, refused.all()):
            await session.run_sync(enqueue_record, Topics.DISPATCH_REQUESTED, record, serde=self._serde)

    async def heartbeat(self, org_id: uuid.UUID, run_ids: Sequence[uuid.UUID]) -> None:
        """Refresh the lease column. Rows locked by their own run's write are skipped (that write
        refreshes it anyway), so a heartbeat never waits for, or deadlocks with, a run."""
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            await session.execute(
                text(
                    "UPDATE ai_agent_runs SET heartbeat_at = now() WHERE id IN ("
                    " SELECT id FROM ai_agent_runs WHERE org_id = :org AND id = ANY(:ids)"
                    " AND status IN ('pending', 'running') FOR UPDATE SKIP LOCKED)"
                ),
                {"org": org_id, "ids": list(run_ids)},
            )

    async def price(self, provider: str, model: str) -> ModelPrice:
        """Catalog prices (a global table, no tenant), cached: they change only with a migration."""
        cached = self._prices.get((provider, model))
        if cached is not None and time.monotonic() - cached[0] < PRICE_CACHE_S:
            return cached[1]
        async with self._sessions() as session, session.begin():
            row = (
                await session.execute(
                    select(
                        AiModel.input_price_micros_per_mtok,
                        AiModel.output_price_micros_per_mtok,
                        AiModel.attributes,
                    ).where(AiModel.provider == provider, AiModel.model == model)
                )
            ).one_or_none()
        price = ModelPrice()
        if row is not None:
            attributes = row.attributes or {}
            price = ModelPrice(
                input_micros_per_mtok=row.input_price_micros_per_mtok,
                output_micros_per_mtok=row.output_price_micros_per_mtok,
                cache_read_micros_per_mtok=_int_or_none(attributes.get("cache_read_micros_per_mtok")),
                cache_write_micros_per_mtok=_int_or_none(attributes.get("cache_write_micros_per_mtok")),
                reasoning=attributes.get("reasoning") is True,
            )
        self._prices[(provider, model)] = (time.monotonic(), price)
        return price

    @staticmethod
    async def _lock_conversation(session: AsyncSession, request: RunRequested) -> tuple[str | None, bool]:
        """Lock the run's conversation row (a takeover and an erasure lock it too); its status (None
        without one) and whether its contact was erased."""
        row = (
            await session.execute(
                _LOCK_CONVERSATION, {"org_id": request.org_id, "conversation_id": request.conversation_id}
            )
        ).one_or_none()
        return (None, False) if row is None else (row.status, bool(row.contact_erased))


def _close_values(request: RunRequested, finish: Finish, failure: RunFailure | None) -> dict[str, Any]:
    """The parameters of ``_CLOSE_RUN``."""
    outcome, cls = finish.outcome, finish.classification
    own = {m.message_id for m in request.messages}
    # Steered messages the run answered too (its own were recorded at the claim).
    steered = [m for m in dict.fromkeys(finish.steered_message_ids) if m not in own]
    return {
        "org_id": request.org_id,
        "run_id": request.run_id,
        "status": cls.status.value,
        "vitality": cls.vitality.value,
        "error_family": cls.error_family.value if cls.error_family else None,
        "abort_reason": outcome.abort_reason,
        "error_code": failure.code if failure else None,
        "error_message": failure.message if failure else None,
        "provider": finish.provider,
        "model": finish.model,
        "tokens_in": outcome.usage.all_input,
        "tokens_out": outcome.usage.output_tokens,
        "cost_micros": outcome.cost_micros,
        "latency_ms": finish.latency_ms,
        "steps_count": outcome.steps,
        "final_text": outcome.final_text,
        "summary": outcome.summary,
        "would_send_to": finish.would_send_to.model_dump_json() if finish.would_send_to else None,
        "actions_executed": json.dumps([a.model_dump(mode="json") for a in finish.actions_executed]),
        "actions_proposed": json.dumps([a.model_dump(mode="json") for a in finish.actions_proposed]),
        "started_at": finish.started_at,
        "completed_at": finish.completed_at,
        "steered": steered,
        "trace_tail": json.dumps(list(finish.trace_tail), default=str, ensure_ascii=False),
        "prompt": None if finish.prompt is None else json.dumps(finish.prompt, ensure_ascii=False),
    }


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) else None


def _add_usage(session: Session, request: RunRequested, usage: TokenUsage, cost: int, at: datetime) -> None:
    record_usage(session, request.org_id, request.agent_id, at, usage.all_input, usage.output_tokens, cost)


_Closing = Row[str | None, int, int, int, datetime | None, datetime | None]


async def _closing(session: AsyncSession, request: RunRequested) -> _Closing | None:
    """How a run row that was no longer active had been closed: by whom it says, and what it counted."""
    return (
        await session.execute(
            select(
                AiAgentRun.error_code,
                AiAgentRun.tokens_in,
                AiAgentRun.tokens_out,
                AiAgentRun.cost_micros,
                AiAgentRun.completed_at,
                AiAgentRun.late_finished_at,
            ).where(AiAgentRun.org_id == request.org_id, AiAgentRun.id == request.run_id)
        )
    ).one_or_none()


async def _add_uncounted_usage(
    session: AsyncSession, request: RunRequested, closing: _Closing | None, usage: TokenUsage, cost: int, at: datetime
) -> None:
    """A run that finished after someone else closed it: its usage, less what that closing put in
    the ledger. A row closed as lost (``_close_lost``) counted the usage it held, which is frozen
    from then on (``append_trace`` updates it only while the run is active); any other closing
    counted nothing. (A row closed by the same finish, retried, is recognized before this.)"""
    counted_in = counted_out = counted_cost = 0
    if closing is not None and closing.error_code == LOST_ERROR_CODE:
        counted_in, counted_out = closing.tokens_in or 0, closing.tokens_out or 0
        counted_cost = closing.cost_micros or 0
    # The lost closing's ledger entry counted the run itself too (``_close_lost`` records one
    # when the row held usage): the remainder is usage only, or /usage shows two runs for one.
    runs = 0 if (counted_in or counted_out or counted_cost) else 1
    rest_in = max(0, usage.all_input - counted_in)
    rest_out = max(0, usage.output_tokens - counted_out)
    rest_cost = max(0, cost - counted_cost)
    if rest_in or rest_out or rest_cost:
        await session.run_sync(
            lambda s: record_usage(s, request.org_id, request.agent_id, at, rest_in, rest_out, rest_cost, runs=runs)
        )


def run_completed(subject: RunSubject, finish: Finish) -> RunCompleted:
    request = subject.request
    outcome, cls = finish.outcome, finish.classification
    failure = outcome.failure or (outcome.handoff.failure if outcome.handoff else None)
    return RunCompleted(
        org_id=request.org_id,
        request_id=request.request_id,
        conversation_id=request.conversation_id,
        contact_id=request.contact_id,
        channel_session_id=request.channel_session_id,
        run_id=request.run_id,
        agent_id=request.agent_id,
        version_id=request.version_id,
        attempt=request.attempt,
        parent_run_id=request.parent_run_id,
        wake_reason=request.wake_reason,
        message_ids=tuple(dict.fromkeys((*(m.message_id for m in request.messages), *finish.steered_message_ids))),
        dispatch_ids=request.dispatch_ids,
        status=cls.status,
        vitality=cls.vitality,
        error_family=cls.error_family,
        error_code=failure.code if failure else None,
        error_message=failure.message if failure else None,
        abort_reason=outcome.abort_reason,
        summary=outcome.summary,
        final_text=outcome.final_text,
        would_send_to=finish.would_send_to,
        provider=finish.provider,
        model=finish.model,
        tokens_in=outcome.usage.input_tokens,
        tokens_out=outcome.usage.output_tokens,
        cache_read_tokens=outcome.usage.cache_read_tokens,
        cache_write_tokens=outcome.usage.cache_write_tokens,
        cost_micro_usd=outcome.cost_micros,
        latency_ms=finish.latency_ms,
        steps=outcome.steps,
        tool_calls=outcome.tool_calls,
        actions_executed=finish.actions_executed,
        actions_proposed=finish.actions_proposed,
        dry_run=request.dry_run,
        started_at=finish.started_at,
        completed_at=finish.completed_at,
    )


async def _mark_late_finish(session: AsyncSession, request: RunRequested, at: datetime) -> None:
    """Record, with the usage it adds, that this finish came after the row was closed (0030)."""
    await session.execute(
        update(AiAgentRun)
        .where(AiAgentRun.org_id == request.org_id, AiAgentRun.id == request.run_id)
        .values(late_finished_at=at)
    )


async def _append_trace_tail(
    session: AsyncSession,
    request: RunRequested,
    entries: Sequence[dict[str, Any]],
    prompt: dict[str, Any] | None = None,
) -> None:
    """The last trace entries (and the prompt, if not written yet), in the closing transaction."""
    if not entries and prompt is None:
        return
    await session.execute(
        text(
            "UPDATE ai_agent_runs SET tool_calls = tool_calls || CAST(:entries AS jsonb),"
            " prompt = coalesce(CAST(:prompt AS jsonb), prompt)"
            " WHERE org_id = :org AND id = :run"
        ),
        {
            "entries": json.dumps(list(entries), default=str, ensure_ascii=False),
            "prompt": None if prompt is None else json.dumps(prompt, ensure_ascii=False),
            "org": request.org_id,
            "run": request.run_id,
        },
    )
