"""The thread summary, kept up to date in the background [003 step 6] — never delaying a reply.

**Who runs it: the runner, after a run finished.** When ``RunExecutor`` has recorded a run's
end (terminal row, ``run_completed`` in the outbox), it hands the run to
:meth:`ThreadSummarizer.after_run`, which starts a *separate* low-priority task and returns
at once: the reply's run is complete before the job even begins, and the job holds no
in-flight slot (``RUNNER_MAX_IN_FLIGHT``) — at most :data:`MAX_CONCURRENT_JOBS` run per
process, others wait for a slot. It uses the run's own provider, model and resolved key,
through the same ``ModelProvider`` interface, with a summarization prompt; the request is
sealed by a :class:`Pseudonymizer` like every request (no raw PII reaches a provider), and the
answer is revealed before it is stored (the stored summary is pseudonymized again by the
next run that shows it).

**When.** Only once the conversation outgrew its window: the messages older than what the
next prompt would show (the version's message, token and 50,000-character windows,
``context.history_window``) and newer than what the summary already covers are folded
into it, oldest first, at most :data:`MAX_BATCH_MESSAGES` per job (the next run continues).
The row records the newest message covered, so a job never summarizes a message twice;
two jobs racing on one conversation (runs finishing on two runners) are serialized by the
row lock, and the one that reaches less far is dropped.

The text is stored in ``conversation_summaries`` (with its coverage, tokens and the run that
started it) and mirrored to ``conversations.summary``, which the prompt's **Memory** layer
shows. A job that fails is logged and forgotten: the next finished run tries again.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

from sqlalchemy import and_, or_, select, tuple_, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from services.runner.attachments import TEXT, model_text
from services.runner.budget import ModelPrice, helper_output
from services.runner.context import history_window
from services.runner.pii import Pseudonymizer
from services.runner.providers import ProviderRegistry
from services.runner.providers.base import (
    CredentialSource,
    ModelRequest,
    ProviderAccess,
    SystemLayer,
    TokenUsage,
    UserMessage,
)
from services.runner.providers.demo import SUMMARY_TASK
from services.runner.subject import HistoryItem, RunSubject
from switchboard.db.models import Contact, Conversation, Message
from switchboard.db.models.memory import ConversationSummary
from switchboard.db.session import async_tenant_transaction
from switchboard.db.usage import record_usage
from switchboard.observability.logging import get_logger
from switchboard.run_outcomes import WITHDRAWN_RUN_LOST

log = get_logger(__name__)

MAX_CONCURRENT_JOBS: Final = 2
MAX_BATCH_MESSAGES: Final = 200
MAX_BATCH_CHARS: Final = 40_000
MAX_MESSAGE_CHARS: Final = 2_000
MAX_SUMMARY_CHARS: Final = 4_000
SUMMARY_OUTPUT_TOKENS: Final = 800

INSTRUCTIONS: Final = (
    "Update the running summary of a WhatsApp conversation between a customer and a business's agent. "
    "Merge the previous summary (if any) with the new messages below. Write at most 15 short lines, in the "
    "conversation's language: who the customer is, what they asked, what was promised or decided, what is still "
    "open. Keep values like <contact_1>, <email_1> or <phone_1> exactly as written. Output only the summary."
)


@dataclass(frozen=True, slots=True)
class Coverage:
    """How far the stored summary reaches (keyset of its newest message)."""

    summary: str | None
    through: tuple[datetime, uuid.UUID] | None
    covered: int
    # When the stored row was made: a job that extends a summary a person cleared meanwhile
    # (``DELETE /api/v1/conversations/{id}/memory/summary``) would put its text back.
    created_at: datetime | None = None


@dataclass(slots=True)
class SpendTally:
    """What a run's own summary calls spent (``/compact``): the run records it, not the org alone."""

    usage: TokenUsage = field(default_factory=TokenUsage)
    cost_micros: int = 0

    def add(self, usage: TokenUsage, cost: int) -> None:
        self.usage += usage
        self.cost_micros += cost


@dataclass(frozen=True, slots=True)
class SummaryJob:
    """What a job needs of the finished run. ``tally``: the calls are the run's own (``/compact``),
    so their spend goes to the run — its row, ``run_completed``, its agent's budget — through the
    run's finish, not to the org's ledger apart."""

    subject: RunSubject
    access: ProviderAccess | None
    tally: SpendTally | None = None


PriceOf = Callable[[str, str], Awaitable[ModelPrice]]


def transcript(items: list[HistoryItem]) -> str:
    """The messages as labeled lines, oldest first (``Customer:`` / ``Agent:``), each clipped."""
    return "\n".join(
        f"{'Customer' if i.direction == 'inbound' else 'Agent'}: {' '.join(i.text.split())[:MAX_MESSAGE_CHARS]}"
        for i in items
    )


def summary_request(
    model: str,
    previous: str | None,
    items: list[HistoryItem],
    price: ModelPrice | None = None,
    *,
    reasoning_allowance_tokens: int = 0,
) -> ModelRequest:
    """The summarization prompt (unsealed): the task, the previous summary, the new messages."""
    system = [SystemLayer(SUMMARY_TASK, INSTRUCTIONS)]
    if previous:
        system.append(SystemLayer("Previous summary", previous))
    cap, reasoning_tokens = helper_output(price or ModelPrice(), SUMMARY_OUTPUT_TOKENS, reasoning_allowance_tokens)
    return ModelRequest(
        model=model,
        system=tuple(system),
        messages=(UserMessage(f"New messages:\n{transcript(items)}"),),
        tools=(),
        max_output_tokens=cap,
        reasoning_tokens=reasoning_tokens,
    )


def nothing_left_the_window(subject: RunSubject) -> bool:
    """True when the history loaded with the run holds every message of the conversation (fewer
    came back than the claim asked for) and all of them fit the version's windows: then no message
    can have left the window, and there is nothing to summarize (the job's own query would find
    the same). A reply stored after the claim is seen by the next run's check."""
    version = subject.version
    if version.history_message_window <= 0:
        return False
    asked = version.history_message_window + len(subject.request.messages) + 1  # RunStore's history limit
    if len(subject.recent_messages) >= asked:
        return False
    window = history_window(
        subject.recent_messages, messages=version.history_message_window, tokens=version.history_token_window
    )
    return not window.older_exist


class ThreadSummarizer:
    """Starts summary jobs after runs and stops them at shutdown (``close``)."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        providers: ProviderRegistry,
        *,
        price: PriceOf,
        call_timeout_s: float,
        reasoning_allowance_tokens: int,
        max_concurrent: int = MAX_CONCURRENT_JOBS,
    ) -> None:
        self._sessions = sessions
        self._providers = providers
        self._price = price
        self._call_timeout_s = call_timeout_s
        self._reasoning_allowance_tokens = reasoning_allowance_tokens
        self._slots = asyncio.Semaphore(max_concurrent)
        self._tasks: set[asyncio.Task[None]] = set()

    def after_run(self, subject: RunSubject, access: ProviderAccess | None) -> None:
        """Start the job for a finished run, without waiting for it (none when nothing can have left the
        window: most conversations are short, and the check then costs no transaction)."""
        if subject.conversation is None or subject.request.dry_run or nothing_left_the_window(subject):
            return
        task = asyncio.create_task(self._guarded(SummaryJob(subject, access)), name="thread-summary")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Cancel pending jobs (a missed summary is made after the conversation's next run)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def wait_idle(self) -> None:
        """Tests: until every started job ended."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _guarded(self, job: SummaryJob) -> None:
        request = job.subject.request
        try:
            async with self._slots:
                await self.summarize(job)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a provider or database failure: the next run tries again
            log.warning(
                "thread summary failed",
                extra={"run_id": str(request.run_id), "error": type(exc).__name__},
                exc_info=True,
            )

    async def summarize(self, job: SummaryJob) -> bool:
        """One job: fold the messages that left the window into the summary. False: nothing to do."""
        subject = job.subject
        version = subject.version
        coverage, batch = await self._pending(subject)
        if not batch:
            return False
        provider = self._providers.get(version.provider)
        if provider.requires_key and (job.access is None or not job.access.api_key):
            return False
        pii = Pseudonymizer(names=[subject.conversation.contact_name if subject.conversation else None])
        price = await self._price(version.provider, version.model)
        sealed = pii.seal(
            summary_request(
                version.model,
                coverage.summary,
                batch,
                price,
                reasoning_allowance_tokens=self._reasoning_allowance_tokens,
            )
        )
        response = await provider.complete(
            sealed, job.access or ProviderAccess(CredentialSource.NONE, None), timeout_s=self._call_timeout_s
        )
        text = pii.reveal(response.text).strip()[:MAX_SUMMARY_CHARS]
        if not text:
            await self._count_only(job, response.usage)  # billed all the same
            return False
        return await self._store(job, coverage, batch, text, response.usage)

    async def _count_only(self, job: SummaryJob, usage: TokenUsage) -> None:
        """The call's spend when there is no summary to store (the model wrote nothing)."""
        if not usage.total:
            return
        cost = await self._cost(job, usage)
        async with self._sessions() as session, async_tenant_transaction(session, job.subject.request.org_id):
            await _count(session, job, usage, cost)

    async def _cost(self, job: SummaryJob, usage: TokenUsage) -> int:
        version = job.subject.version
        return (await self._price(version.provider, version.model)).cost(usage) if usage.total else 0

    async def _pending(self, subject: RunSubject) -> tuple[Coverage, list[HistoryItem]]:
        """The stored coverage and the messages to fold in: older than the window, newer than the summary."""
        request, version = subject.request, subject.version
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            row = await session.scalar(
                select(ConversationSummary).where(
                    ConversationSummary.org_id == request.org_id,
                    ConversationSummary.conversation_id == request.conversation_id,
                )
            )
            coverage = (
                Coverage(
                    row.summary, (row.through_occurred_at, row.through_message_id), row.messages_covered, row.created_at
                )
                if row
                else Coverage(None, None, 0)
            )
            # Messages with a text or an attachment, as the prompt's history counts them.
            base = select(Message.id, Message.direction, Message.body, Message.occurred_at, Message.content_type).where(
                Message.org_id == request.org_id,
                Message.conversation_id == request.conversation_id,
                or_(Message.body != "", Message.content_type != TEXT),
                Message.delivery_error.is_distinct_from(WITHDRAWN_RUN_LOST),  # never said
            )
            recent = [
                HistoryItem(r.id, r.direction, model_text(r.content_type, r.body or ""), r.occurred_at)
                for r in await session.execute(
                    base.order_by(Message.occurred_at.desc(), Message.id.desc()).limit(
                        version.history_message_window + 1
                    )
                )
            ]
            window = history_window(
                recent, messages=version.history_message_window, tokens=version.history_token_window
            )
            if not window.older_exist:
                return coverage, []
            start = (window.kept[0].occurred_at, window.kept[0].message_id) if window.kept else None
            query = base.order_by(Message.occurred_at, Message.id).limit(MAX_BATCH_MESSAGES)
            if start is not None:
                query = query.where(tuple_(Message.occurred_at, Message.id) < tuple_(*start))
            if coverage.through is not None:
                query = query.where(tuple_(Message.occurred_at, Message.id) > tuple_(*coverage.through))
            rows = (await session.execute(query)).all()
        batch: list[HistoryItem] = []
        used = 0
        for r in rows:
            used += min(len(r.body or ""), MAX_MESSAGE_CHARS)
            if batch and used > MAX_BATCH_CHARS:
                break
            batch.append(HistoryItem(r.id, r.direction, model_text(r.content_type, r.body or ""), r.occurred_at))
        return coverage, batch

    async def _store(
        self, job: SummaryJob, coverage: Coverage, batch: list[HistoryItem], text: str, usage: TokenUsage
    ) -> bool:
        request, version = job.subject.request, job.subject.version
        last = batch[-1]
        through = (last.occurred_at, last.message_id)
        cost = await self._cost(job, usage)
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            # The conversation first, then its summary: the lock order of the other writers (an
            # erasure, a person clearing the summary). An erased customer's summary is not written
            # back: this job may have read their messages before the erasure.
            conversation = (
                await session.execute(
                    select(Contact.erased_at)
                    .select_from(Conversation)
                    .outerjoin(
                        Contact, and_(Contact.org_id == Conversation.org_id, Contact.id == Conversation.contact_id)
                    )
                    .where(Conversation.org_id == request.org_id, Conversation.id == request.conversation_id)
                    .with_for_update(of=Conversation, key_share=True)
                )
            ).one_or_none()
            if conversation is None or conversation.erased_at is not None:
                await _count(session, job, usage, cost)  # the call was billed all the same
                return False
            current = await session.scalar(
                select(ConversationSummary)
                .where(
                    ConversationSummary.org_id == request.org_id,
                    ConversationSummary.conversation_id == request.conversation_id,
                )
                .with_for_update()
            )
            if coverage.created_at is not None and (current is None or current.created_at != coverage.created_at):
                # The summary this job extended was cleared by a person: its text must not come back.
                await _count(session, job, usage, cost)  # the call was billed all the same
                log.info(
                    "thread summary cleared while a job extended it; not stored",
                    extra={"run_id": str(request.run_id), "conversation_id": str(request.conversation_id)},
                )
                return False
            if current is not None and (current.through_occurred_at, current.through_message_id) >= through:
                await _count(session, job, usage, cost)  # another job got at least as far; this call was billed
                return False
            values = {
                "summary": text,
                "through_occurred_at": through[0],
                "through_message_id": through[1],
                "messages_covered": coverage.covered + len(batch),
                "source_run_id": request.run_id,
                "provider": version.provider,
                "model": version.model,
                "tokens_in": usage.all_input,
                "tokens_out": usage.output_tokens,
            }
            await session.execute(
                insert(ConversationSummary)
                .values(org_id=request.org_id, conversation_id=request.conversation_id, **values)
                .on_conflict_do_update(
                    index_elements=[ConversationSummary.conversation_id],
                    set_={**values, "revision": ConversationSummary.revision + 1, "updated_at": _now()},
                )
            )
            await session.execute(
                update(Conversation)
                .where(Conversation.org_id == request.org_id, Conversation.id == request.conversation_id)
                .values(summary=text)
            )
            await _count(session, job, usage, cost)
        log.info(
            "thread summary updated",
            extra={"run_id": str(request.run_id), "conversation_id": str(request.conversation_id)},
        )
        return True


async def _count(session: AsyncSession, job: SummaryJob, usage: TokenUsage, cost: int) -> None:
    """A summary call in the usage ledger: the org's, outside any agent's budget (no agent id) —
    unless the call is the run's own work (``job.tally``): then the run's finish records it."""
    if not usage.total:
        return
    if job.tally is not None:
        job.tally.add(usage, cost)
        return
    org_id = job.subject.request.org_id
    await session.run_sync(
        lambda s: record_usage(s, org_id, None, _now(), usage.all_input, usage.output_tokens, cost, runs=0)
    )


def _now() -> datetime:
    return datetime.now(UTC)
