"""Everything the runner writes to and reads from PostgreSQL — the run's system of record.

Every method is one short tenant transaction (``async_tenant_transaction``):
row-level security scopes it to the run's org, and every query filters by org
as well. Events derived from a row change (``run_started``, ``run_completed``,
``handoff_triggered``) are enqueued in the transactional outbox in the same
transaction, after locking the conversation row so outbox ids follow commit
order per conversation (``switchboard.db.outbox``).

The run row: ``pending`` when the runner takes the run, ``running`` with
``run_started``, a terminal status with ``run_completed``. The trace
(``tool_calls``) and running totals are appended after every step. A
one-step run costs four transactions: claim (row + subject + history), start
(running + ``run_started`` + credential), one trace append, finish.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Generic, TypeVar

from sqlalchemy import ARRAY, cast, func, select, text, update
from sqlalchemy.dialects.postgresql import UUID as PG_UUID
from sqlalchemy.dialects.postgresql import array, insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session

from services.runner.budget import ModelPrice
from services.runner.label_filter import CLASSIFICATION_MISMATCH, redispatches
from services.runner.outcome import Classification, LoopOutcome
from services.runner.providers.base import TokenUsage
from services.runner.subject import ConversationInfo, HistoryItem, RunSubject, VersionConfig
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
from switchboard.db.enums import ACTIVE_RUN_STATUSES, CredentialValidation
from switchboard.db.models import (
    AiAgent,
    AiAgentRun,
    AiAgentVersion,
    AiModel,
    AiProviderCredential,
    Contact,
    Conversation,
    Message,
)
from switchboard.db.outbox import enqueue_record
from switchboard.db.session import async_tenant_transaction
from switchboard.db.usage import record_usage

_ACTIVE = [s.value for s in ACTIVE_RUN_STATUSES]
PRICE_CACHE_S = 300.0
T = TypeVar("T")


class ClaimState(StrEnum):
    CREATED = "created"  # the row is ours, pending
    DUPLICATE = "duplicate"  # this run id already exists (redelivery): nothing to do
    BUSY = "busy"  # another live run holds the conversation: wait and retry


@dataclass(frozen=True, slots=True)
class Claim:
    state: ClaimState
    subject: RunSubject | None = None
    busy_run_id: uuid.UUID | None = None
    existing_status: str | None = None
    # A recovery attempt whose messages another run of the conversation already answered.
    answered_by: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class Started(Generic[T]):
    """The run is ``running``; ``resolved`` is what the start transaction's resolver returned."""

    resolved: T | None


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
    trace_tail: Sequence[dict[str, Any]] = ()
    # Steered messages taken in at a turn boundary (answered by this run too).
    steered_message_ids: tuple[uuid.UUID, ...] = ()


def _version_config(row: AiAgentVersion) -> VersionConfig:
    return VersionConfig(
        id=row.id,
        agent_id=row.agent_id,
        version_number=row.version_number,
        system_prompt=row.system_prompt,
        provider=row.provider,
        model=row.model,
        credential_id=row.credential_id,
        tool_ids=tuple(row.tool_ids or ()),
        max_steps=row.max_steps,
        token_budget=row.token_budget,
        cost_budget_micros=row.cost_budget_micros,
        history_message_window=row.history_message_window,
        history_token_window=row.history_token_window,
        handoff_keywords=tuple(row.handoff_keywords or ()),
        handoff_tool_enabled=row.handoff_tool_enabled,
        followup=dict(row.followup or {}),
        persona=row.persona,
        skills=tuple(row.skills or ()),
        channel_session_id=row.channel_session_id,
        silence_timeout_minutes=row.silence_timeout_minutes,
        subagent_ids=tuple(row.subagent_ids or ()),
        classification_enabled=row.classification_enabled,
    )


class RunStore:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], serde: Serde, *, runner_id: str) -> None:
        self._sessions = sessions
        self._serde = serde
        self._runner_id = runner_id
        self._prices: dict[tuple[str, str], tuple[float, ModelPrice]] = {}

    # ------------------------------------------------------------------ taking a run

    async def claim(self, request: RunRequested, *, stale_after_s: float) -> Claim:
        """Insert the ``pending`` row and load the run's subject, in one transaction.

        A run whose conversation is held by another active run: if that run is this
        run's parent (recovery) or its heartbeat is older than ``stale_after_s``, its
        runner is gone — it is closed as ``processLost`` and the claim retried once;
        otherwise the claim reports BUSY and the caller waits.
        """
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            existing = await session.scalar(
                select(AiAgentRun.status).where(AiAgentRun.org_id == request.org_id, AiAgentRun.id == request.run_id)
            )
            if existing is not None:
                return Claim(ClaimState.DUPLICATE, existing_status=existing)
            for _ in range(2):
                if await self._insert_pending(session, request):
                    return Claim(
                        ClaimState.CREATED,
                        subject=await self._subject(session, request),
                        answered_by=await self._answered_by(session, request),
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

    async def _insert_pending(self, session: AsyncSession, request: RunRequested) -> bool:
        if request.parent_run_id is not None:
            await self._record_unclaimed_parent(session, request)
        message_ids = [m.message_id for m in request.messages]
        known: set[uuid.UUID] = set()
        if message_ids:
            known = set(
                (
                    await session.scalars(
                        select(Message.id).where(Message.org_id == request.org_id, Message.id.in_(message_ids))
                    )
                ).all()
            )
        conversation_id = await session.scalar(
            select(Conversation.id).where(
                Conversation.org_id == request.org_id, Conversation.id == request.conversation_id
            )
        )
        values = {
            "id": request.run_id,
            "org_id": request.org_id,
            "agent_id": request.agent_id,
            "agent_version_id": request.version_id,
            "conversation_id": conversation_id,
            "contact_id": request.contact_id if conversation_id else None,
            "channel_session_id": request.channel_session_id if conversation_id else None,
            "inbound_message_id": next((m for m in message_ids if m in known), None),
            "inbound_message_ids": [m for m in message_ids if m in known],
            "status": RunStatus.PENDING.value,
            "wake_reason": request.wake_reason.value,
            "wake_context": request.wake_context.model_dump(mode="json", exclude_none=True),
            "attempt": request.attempt,
            "parent_run_id": request.parent_run_id,
            "is_dry_run": request.dry_run,
            "heartbeat_at": datetime.now(UTC),
        }
        # ON CONFLICT DO NOTHING without a target also covers the partial unique index
        # "one active run per conversation": no exception, just no row.
        inserted = await session.scalar(
            insert(AiAgentRun).values(**values).on_conflict_do_nothing().returning(AiAgentRun.id)
        )
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
                error_code="process_lost",
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

    async def _close_lost(self, session: AsyncSession, org_id: uuid.UUID, run_id: uuid.UUID) -> None:
        await session.execute(
            update(AiAgentRun)
            .where(AiAgentRun.org_id == org_id, AiAgentRun.id == run_id, AiAgentRun.status.in_(_ACTIVE))
            .values(
                status=RunStatus.FAILED.value,
                vitality="dead",
                error_family="processLost",
                error_code="process_lost",
                error_message="the runner holding this run stopped heartbeating; a new attempt took over",
                completed_at=datetime.now(UTC),
            )
        )

    async def _subject(self, session: AsyncSession, request: RunRequested) -> RunSubject:
        version = await session.scalar(
            select(AiAgentVersion).where(
                AiAgentVersion.org_id == request.org_id, AiAgentVersion.id == request.version_id
            )
        )
        if version is None:  # the FK on the run row makes this unreachable; keep mypy honest
            raise LookupError(f"version {request.version_id} not found")
        agent_name = await session.scalar(
            select(AiAgent.name).where(AiAgent.org_id == request.org_id, AiAgent.id == request.agent_id)
        )
        conversation = (
            await session.execute(
                select(Conversation, Contact.display_name)
                .outerjoin(Contact, Contact.id == Conversation.contact_id)
                .where(Conversation.org_id == request.org_id, Conversation.id == request.conversation_id)
            )
        ).one_or_none()
        info = None
        if conversation is not None:
            row, contact_name = conversation
            info = ConversationInfo(
                id=row.id,
                chat_id=row.chat_id,
                channel_session_id=row.channel_session_id,
                contact_name=contact_name,
                summary=row.summary,
            )
        config = _version_config(version)
        recent: tuple[HistoryItem, ...] = ()
        if info is not None and config.history_message_window > 0:
            # One more than needed: the context knows whether older messages exist beyond the window.
            limit = config.history_message_window + len(request.messages) + 1
            rows = (
                await session.execute(
                    select(Message.id, Message.direction, Message.body, Message.occurred_at)
                    .where(Message.org_id == request.org_id, Message.conversation_id == info.id, Message.body != "")
                    .order_by(Message.occurred_at.desc())
                    .limit(limit)
                )
            ).all()
            recent = tuple(HistoryItem(r.id, r.direction, r.body, r.occurred_at) for r in rows)
        return RunSubject(
            request=request,
            agent_name=agent_name or "agent",
            version=config,
            conversation=info,
            recent_messages=recent,
        )

    # ------------------------------------------------------------------ life cycle

    async def start(
        self,
        subject: RunSubject,
        *,
        provider: str,
        model: str,
        started_at: datetime,
        resolve: Callable[[Session], T] | None = None,
    ) -> Started[T] | None:
        """pending → running with ``run_started`` in the outbox; in the same transaction, ``resolve``
        (the credential lookup, which needs the tenant) runs on a sync session. None if the row was
        no longer pending (closed meanwhile by a newer attempt)."""
        request = subject.request
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            await self._lock_conversation(session, request)
            result = await session.execute(
                update(AiAgentRun)
                .where(
                    AiAgentRun.org_id == request.org_id,
                    AiAgentRun.id == request.run_id,
                    AiAgentRun.status == RunStatus.PENDING.value,
                )
                .values(
                    status=RunStatus.RUNNING.value,
                    started_at=started_at,
                    heartbeat_at=started_at,
                    provider=provider,
                    model=model,
                )
                .returning(AiAgentRun.id)
            )
            if result.scalar_one_or_none() is None:
                return None
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
                provider=provider,
                model=model,
                runner_id=self._runner_id,
                started_at=started_at,
                dry_run=request.dry_run,
            )
            enqueue_record(session.sync_session, Topics.RUN_STARTED, record, serde=self._serde)
            resolved = await session.run_sync(resolve) if resolve is not None else None
        return Started(resolved)

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
        """``prompt``: the composed prompt (issue 6), written with the first append — no extra transaction."""
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            await session.execute(
                text(
                    "UPDATE ai_agent_runs SET tool_calls = tool_calls || CAST(:entries AS jsonb),"
                    " steps_count = :steps, tokens_in = :tin, tokens_out = :tout, cost_micros = :cost,"
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
        outcome, cls = finish.outcome, finish.classification
        failure = outcome.failure or (outcome.handoff.failure if outcome.handoff else None)
        usage = outcome.usage
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            await self._lock_conversation(session, request)
            await _append_trace_tail(session, request, finish.trace_tail)
            closed = await session.scalar(
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
                    abort_reason=outcome.abort_reason,
                    error_code=failure.code if failure else None,
                    error_message=failure.message if failure else None,
                    provider=finish.provider,
                    model=finish.model,
                    tokens_in=usage.all_input,
                    tokens_out=usage.output_tokens,
                    cost_micros=outcome.cost_micros,
                    latency_ms=finish.latency_ms,
                    steps_count=outcome.steps,
                    final_text=outcome.final_text,
                    summary=outcome.summary,
                    would_send_to=finish.would_send_to.model_dump(mode="json") if finish.would_send_to else None,
                    actions_executed=[a.model_dump(mode="json") for a in finish.actions_executed],
                    actions_proposed=[a.model_dump(mode="json") for a in finish.actions_proposed],
                    started_at=finish.started_at,
                    completed_at=finish.completed_at,
                    **_with_steered(request, finish.steered_message_ids),
                )
                .returning(AiAgentRun.id)
            )
            if closed is None:
                await session.run_sync(_add_usage, request, usage, outcome.cost_micros, finish.completed_at)
                return False
            if finish.invalid_credential_id is not None:
                await session.execute(
                    update(AiProviderCredential)
                    .where(
                        AiProviderCredential.org_id == request.org_id,
                        AiProviderCredential.id == finish.invalid_credential_id,
                    )
                    .values(
                        validation_status=CredentialValidation.INVALID.value,
                        validation_error="rejected by the provider during a run (invalid or revoked key)",
                        validated_at=finish.completed_at,
                    )
                )
            if finish.outcome.handoff is not None:
                handoff = finish.outcome.handoff
                enqueue_record(
                    session.sync_session,
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
            enqueue_record(
                session.sync_session, Topics.RUN_COMPLETED, run_completed(subject, finish), serde=self._serde
            )
            if outcome.abort_reason == CLASSIFICATION_MISMATCH and not request.dry_run:
                await self._redispatch(session, request)
            # The usage ledger: an append, no lock shared with the org's other runs (fold_usage).
            await session.run_sync(_add_usage, request, usage, outcome.cost_micros, finish.completed_at)
        return True

    async def hand_back(self, subject: RunSubject, finish: Finish, *, error_code: str = "runner_shutdown") -> None:
        """Shutdown (or a newer attempt of the run arrived): close the row as lost and count its usage,
        but emit no ``run_completed``, so the dispatcher's lease (or the newer attempt) takes over."""
        request = subject.request
        outcome, cls = finish.outcome, finish.classification
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            await _append_trace_tail(session, request, finish.trace_tail)
            await session.execute(
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
                    error_message="the run stopped before it finished; handed back for recovery",
                    tokens_in=outcome.usage.all_input,
                    tokens_out=outcome.usage.output_tokens,
                    cost_micros=outcome.cost_micros,
                    steps_count=outcome.steps,
                    latency_ms=finish.latency_ms,
                    completed_at=finish.completed_at,
                )
            )
            await session.run_sync(_add_usage, request, outcome.usage, outcome.cost_micros, finish.completed_at)

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
            enqueue_record(session.sync_session, Topics.DISPATCH_REQUESTED, record, serde=self._serde)

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
            )
        self._prices[(provider, model)] = (time.monotonic(), price)
        return price

    @staticmethod
    async def _lock_conversation(session: AsyncSession, request: RunRequested) -> None:
        """``FOR NO KEY UPDATE``: serializes the conversation's outbox writers (the webhook's upsert
        takes the same lock) without blocking the foreign-key checks of rows that reference it."""
        await session.execute(
            select(Conversation.id)
            .where(Conversation.org_id == request.org_id, Conversation.id == request.conversation_id)
            .with_for_update(key_share=True)
        )


def _with_steered(request: RunRequested, steered: Sequence[uuid.UUID]) -> dict[str, Any]:
    """The row's ``inbound_message_ids`` plus the steered messages the run answered (never one of
    its own messages: those were recorded at the claim)."""
    own = {m.message_id for m in request.messages}
    added = [m for m in dict.fromkeys(steered) if m not in own]
    if not added:
        return {}
    uuids = ARRAY(PG_UUID(as_uuid=True))
    return {"inbound_message_ids": func.array_cat(AiAgentRun.inbound_message_ids, cast(array(added), uuids))}


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) else None


def _add_usage(session: Session, request: RunRequested, usage: TokenUsage, cost: int, at: datetime) -> None:
    record_usage(session, request.org_id, request.agent_id, at, usage.all_input, usage.output_tokens, cost)


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


async def _append_trace_tail(session: AsyncSession, request: RunRequested, entries: Sequence[dict[str, Any]]) -> None:
    """The last trace entries (those written at the very end of a run), in the closing transaction."""
    if not entries:
        return
    await session.execute(
        text(
            "UPDATE ai_agent_runs SET tool_calls = tool_calls || CAST(:entries AS jsonb)"
            " WHERE org_id = :org AND id = :run"
        ),
        {
            "entries": json.dumps(list(entries), default=str, ensure_ascii=False),
            "org": request.org_id,
            "run": request.run_id,
        },
    )
