"""The follow-up scheduler: each due ``scheduled_followups`` row becomes one ``followUp`` wake.

Where it runs (docs/memory.md): in every API process, next to the outbox relay, because
what it produces *is* an outbox row — no other service writes the outbox from a timer, and
the API already holds the database pool and the serde. It needs no leader: several
replicas (or two loops in one process) are safe by construction.

**Exactly once.** Per org, one transaction: ``SELECT … FOR UPDATE SKIP LOCKED`` claims due
rows still ``scheduled`` (a row another instance holds is skipped, a row it already fired no
longer matches), then sets them ``fired`` and puts one ``dispatch_requested`` per row in the
outbox — the status change and the event commit together or not at all. Downstream, the
relay may publish a row twice after a crash, and the dispatcher drops a dispatch whose event
id it has seen, so the agent is woken once.

Finding due rows across orgs needs no privileged role: the ``list_due_followups`` lookup
(SECURITY DEFINER, ids only) names them, then each org's rows are claimed under its own
``app.org_id`` (row-level security).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session

from services.api.channels.service import ChannelSessionArchived, archived_at
from services.api.conversations.wake import wake_dispatch
from switchboard.contracts import Serde, Topics, WakeContext, WakeReason
from switchboard.db import lookups
from switchboard.db.enums import ConversationStatus, FollowupStatus
from switchboard.db.models import Conversation, ScheduledFollowup
from switchboard.db.outbox import enqueue_record
from switchboard.db.session import async_tenant_transaction
from switchboard.observability.logging import get_logger

log = get_logger(__name__)

NOT_DISPATCHABLE = "conversation_not_dispatchable"
# A follow-up of a conversation whose number was archived (docs/api.md ":archive").
CHANNEL_SESSION_ARCHIVED = ChannelSessionArchived.code


@dataclass(frozen=True, slots=True)
class Fired:
    followup_id: uuid.UUID
    org_id: uuid.UUID
    dispatch_id: uuid.UUID | None  # None: marked failed (conversation handed off, closed or gone)


def fire_due(session: Session, serde: Serde, org_id: uuid.UUID, ids: list[uuid.UUID], now: datetime) -> list[Fired]:
    """Claim and fire the org's due follow-ups among ``ids``, in the caller's tenant transaction."""
    claimed = session.scalars(
        select(ScheduledFollowup)
        .where(
            ScheduledFollowup.org_id == org_id,
            ScheduledFollowup.id.in_(ids),
            ScheduledFollowup.status == FollowupStatus.SCHEDULED.value,
            ScheduledFollowup.due_at <= now,
        )
        .order_by(ScheduledFollowup.due_at, ScheduledFollowup.id)
        .with_for_update(skip_locked=True)
    ).all()
    fired: list[Fired] = []
    for followup in claimed:
        # Outbox writers of a conversation serialize on its row (records keep commit order). Taken
        # without waiting: every other writer locks the conversation first and the follow-ups after
        # (an erasure cancels them), so waiting here, a follow-up locked, was a deadlock — the
        # erasure failed with a 500. A conversation busy now is fired at a later pass.
        conversation = session.scalars(
            select(Conversation)
            .where(Conversation.org_id == org_id, Conversation.id == followup.conversation_id)
            .with_for_update(skip_locked=True)
        ).one_or_none()
        if conversation is None and _conversation_exists(session, org_id, followup.conversation_id):
            continue  # locked by another writer: left scheduled for the next pass
        if (
            conversation is None
            or conversation.status != ConversationStatus.OPEN.value
            or conversation.is_group
            or conversation.contact_id is None
        ):
            followup.status = FollowupStatus.FAILED.value
            followup.error = NOT_DISPATCHABLE
            fired.append(Fired(followup.id, org_id, None))
            continue
        if archived_at(session, org_id, conversation.channel_session_id) is not None:
            followup.status = FollowupStatus.FAILED.value  # scheduled after the archive cancelled the rest
            followup.error = CHANNEL_SESSION_ARCHIVED
            fired.append(Fired(followup.id, org_id, None))
            continue
        record = wake_dispatch(
            conversation,
            WakeReason.FOLLOW_UP,
            WakeContext(follow_up_id=followup.id, run_id=followup.created_by_run_id),
            request_id=f"followup:{followup.id}",
            target_agent_id=followup.agent_id,
        )
        enqueue_record(session, Topics.DISPATCH_REQUESTED, record, serde=serde)
        followup.status = FollowupStatus.FIRED.value
        followup.fired_at = now
        fired.append(Fired(followup.id, org_id, record.event_id))
    session.flush()
    return fired


def _conversation_exists(session: Session, org_id: uuid.UUID, conversation_id: uuid.UUID) -> bool:
    return (
        session.scalar(
            select(Conversation.id).where(Conversation.org_id == org_id, Conversation.id == conversation_id)
        )
        is not None
    )


class FollowupScheduler:
    """Polls for due follow-ups every ``poll_s`` and fires them (``start()`` / ``stop()`` when embedded)."""

    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], serde: Serde, *, poll_s: float = 1.0, batch: int = 100
    ) -> None:
        self._sessions = sessions
        self._serde = serde
        self._poll_s = poll_s
        self._batch = batch
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def tick(self, now: datetime | None = None) -> list[Fired]:
        """One pass: every follow-up due by ``now`` that no other instance holds, fired."""
        moment = now or datetime.now(UTC)
        async with self._sessions() as session, session.begin():
            due = await session.run_sync(lambda s: lookups.list_due_followups(s, moment, self._batch))
        by_org: dict[uuid.UUID, list[uuid.UUID]] = defaultdict(list)
        for item in due:
            by_org[item.org_id].append(item.followup_id)
        fired: list[Fired] = []
        for org_id, ids in by_org.items():
            fired += await self._fire_org(org_id, ids, moment)
        for done in fired:
            log.info(
                "follow-up fired" if done.dispatch_id else "follow-up not fired: conversation not dispatchable",
                extra={"followup_id": str(done.followup_id), "organization_id": str(done.org_id)},
            )
        return fired

    async def _fire_org(self, org_id: uuid.UUID, ids: list[uuid.UUID], moment: datetime) -> list[Fired]:
        """One org's claim, status change and outbox rows: one transaction."""
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            return await session.run_sync(lambda s: fire_due(s, self._serde, org_id, ids, moment))

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.tick()
            except Exception as exc:  # the database blinked: try again next poll
                log.warning("follow-up scheduler pass failed", extra={"error": type(exc).__name__}, exc_info=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._poll_s)

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(self._stop), name="followup-scheduler")

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
