"""The CRM tools behind the internal MCP server: what each one reads or writes.

Every call runs in one tenant transaction for the token's org
(``async_tenant_transaction``: row-level security), filters by org in the
query too, and is confined to the token's conversation where it touches one.
Write tools in a dry run change nothing and say so. Failures the model can fix
raise :class:`ToolFailure`, which the server turns into an error result.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import or_, select, tuple_, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from services.api.channels.service import archived_at
from switchboard.db.enums import (
    ACTIVE_RUN_STATUSES,
    FollowupStatus,
    MessageDeliveryStatus,
    MessageDirection,
    MessageSender,
)
from switchboard.db.models import AiAgentRun, Contact, Conversation, Message, ScheduledFollowup
from switchboard.db.queued_messages import APPROVED
from switchboard.db.session import async_tenant_transaction
from switchboard.run_outcomes import WITHDRAWN_RUN_LOST
from switchboard.run_tokens import RunTokenClaims

MAX_SEARCH_RESULTS = 20
MAX_HISTORY = 100
MAX_FOLLOWUP_MINUTES = 60 * 24 * 90


class ToolFailure(Exception):
    """An expected failure, shown to the model as the tool's error result."""


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:24]


def _parse_cursor(value: str) -> tuple[datetime, uuid.UUID]:
    stamp, _, message_id = value.partition("|")
    try:
        moment = datetime.fromisoformat(stamp)
        return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)), uuid.UUID(message_id or str(uuid.UUID(int=0)))
    except ValueError:
        raise ToolFailure("before must be the next_before value of a previous answer") from None


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat(timespec="seconds") if value else None


async def ensure_run_going(session: AsyncSession, claims: RunTokenClaims) -> None:
    """Every write tool's first step: a run closed meanwhile — superseded by a newer attempt, lost,
    stopped — writes nothing (its token outlives it by design: at least an hour). Its runner may not
    know yet (a call already on its way, a process that lost its lease), and a message, follow-up,
    fact or insight written now would double the attempt that took over, or outlive a stop. The run
    row is read ``FOR SHARE``: a claim closing it waits for this write, or this write sees it
    closed. An owner's approval acts after its run ended, by design (``claims.approved``)."""
    if claims.approved:
        return
    status = await session.scalar(
        select(AiAgentRun.status)
        .where(AiAgentRun.org_id == claims.org_id, AiAgentRun.id == claims.run_id)
        .with_for_update(read=True)
    )
    if status not in ACTIVE_RUN_STATUSES:
        raise ToolFailure("this run has ended (a newer attempt took over, or it was stopped): nothing was done")


@dataclass
class CrmTools:
    sessions: async_sessionmaker[AsyncSession]

    async def _conversation(self, session: AsyncSession, claims: RunTokenClaims) -> Conversation:
        if claims.conversation_id is None:
            raise ToolFailure("this run has no conversation")
        conversation = await session.scalar(
            select(Conversation).where(Conversation.org_id == claims.org_id, Conversation.id == claims.conversation_id)
        )
        if conversation is None:
            raise ToolFailure("the conversation of this run does not exist")
        return conversation

    async def _writable_conversation(self, session: AsyncSession, claims: RunTokenClaims) -> Conversation:
        """The conversation a write acts on, once its run is known to be still going
        (``ensure_run_going``). Nothing is written for a conversation whose number was archived:
        it could never be sent."""
        await ensure_run_going(session, claims)
        conversation = await self._conversation(session, claims)
        archived = await session.run_sync(lambda s: archived_at(s, claims.org_id, conversation.channel_session_id))
        if archived is not None:  # nothing goes out through a number given up (docs/api.md ":archive")
            raise ToolFailure("this conversation's WhatsApp number was archived: nothing can be sent or scheduled")
        return conversation

    async def search_contacts(self, claims: RunTokenClaims, *, query: str, limit: int) -> dict[str, Any]:
        text = query.strip()
        if not text:
            raise ToolFailure("query must not be empty")
        pattern = f"%{text.replace('%', '').replace('_', '')}%"
        async with self.sessions() as session, async_tenant_transaction(session, claims.org_id):
            rows = (
                await session.scalars(
                    select(Contact)
                    .where(
                        Contact.org_id == claims.org_id,
                        or_(
                            Contact.display_name.ilike(pattern),
                            Contact.phone_number.ilike(pattern),
                            Contact.email.ilike(pattern),
                            Contact.external_id.ilike(pattern),
                        ),
                    )
                    .order_by(Contact.display_name)
                    .limit(max(1, min(limit, MAX_SEARCH_RESULTS)))
                )
            ).all()
        return {
            "contacts": [
                {"contact_id": str(c.id), "name": c.display_name, "phone": c.phone_number, "email": c.email}
                for c in rows
            ]
        }

    async def conversation_history(self, claims: RunTokenClaims, *, limit: int, before: str | None) -> dict[str, Any]:
        """Newest ``limit`` messages before the cursor, returned oldest first; keyset paging on
        (occurred_at, id), so messages with equal timestamps are never skipped."""
        cursor = _parse_cursor(before) if before else None
        async with self.sessions() as session, async_tenant_transaction(session, claims.org_id):
            conversation = await self._conversation(session, claims)
            query = (
                select(Message)
                .where(
                    Message.org_id == claims.org_id,
                    Message.conversation_id == conversation.id,
                    # A lost run's withdrawn message was never sent: not something the agent said.
                    Message.delivery_error.is_distinct_from(WITHDRAWN_RUN_LOST),
                )
                .order_by(Message.occurred_at.desc(), Message.id.desc())
                .limit(max(1, min(limit, MAX_HISTORY)))
            )
            if cursor is not None:
                query = query.where(tuple_(Message.occurred_at, Message.id) < tuple_(*cursor))
            rows = list((await session.scalars(query)).all())
        rows.reverse()
        return {
            "messages": [
                {
                    "message_id": str(m.id),
                    "direction": m.direction,
                    "sender": m.sender,
                    "content_type": m.content_type,  # an attachment's text is its caption
                    "text": m.body,
                    "at": _iso(m.occurred_at),
                }
                for m in rows
            ],
            "next_before": f"{rows[0].occurred_at.isoformat()}|{rows[0].id}" if rows else None,
        }

    async def send_whatsapp_message(self, claims: RunTokenClaims, *, text: str) -> dict[str, Any]:
        body = text.strip()
        if not body:
            raise ToolFailure("text must not be empty")
        if claims.dry_run:
            return {"status": "not_sent", "reason": "dry run: nothing is sent to the customer"}
        async with self.sessions() as session, async_tenant_transaction(session, claims.org_id):
            conversation = await self._writable_conversation(session, claims)
            dedupe_key = f"agent-tool:{claims.run_id}:{_digest(body)}"
            message_id = uuid.uuid4()
            inserted = await session.scalar(
                insert(Message)
                .values(
                    id=message_id,
                    org_id=claims.org_id,
                    conversation_id=conversation.id,
                    channel_session_id=conversation.channel_session_id,
                    direction=MessageDirection.OUTBOUND.value,
                    sender=MessageSender.AGENT.value,
                    dedupe_key=dedupe_key,
                    body=body,
                    delivery_status=MessageDeliveryStatus.PENDING.value,
                    run_id=claims.run_id,
                    attributes={
                        "intent": "crm_send_whatsapp_message",
                        "agent_id": str(claims.agent_id),
                        # The owner approved it: a recovery attempt never withdraws it (runner/superseded.py).
                        **({APPROVED: True} if claims.approved else {}),
                    },
                )
                .on_conflict_do_nothing()
                .returning(Message.id)
            )
        # Recorded as an intent: delivery is the channel side's job (not sent from here).
        return {"status": "queued", "message_id": str(inserted or message_id), "duplicate": inserted is None}

    async def schedule_followup(self, claims: RunTokenClaims, *, reason: str, due_in_minutes: int) -> dict[str, Any]:
        if not 1 <= due_in_minutes <= MAX_FOLLOWUP_MINUTES:
            raise ToolFailure(f"due_in_minutes must be between 1 and {MAX_FOLLOWUP_MINUTES}")
        if not reason.strip():
            raise ToolFailure("reason must not be empty")
        due_at = datetime.now(UTC) + timedelta(minutes=due_in_minutes)
        if claims.dry_run:
            return {"status": "not_scheduled", "reason": "dry run", "due_at": _iso(due_at)}
        async with self.sessions() as session, async_tenant_transaction(session, claims.org_id):
            conversation = await self._writable_conversation(session, claims)
            key = f"run:{claims.run_id}:{_digest(reason.strip(), str(due_in_minutes))}"
            followup_id = uuid.uuid4()
            inserted = await session.scalar(
                insert(ScheduledFollowup)
                .values(
                    id=followup_id,
                    org_id=claims.org_id,
                    conversation_id=conversation.id,
                    contact_id=conversation.contact_id,
                    agent_id=claims.agent_id,
                    created_by_run_id=claims.run_id,
                    due_at=due_at,
                    reason=reason.strip()[:1000],
                    idempotency_key=key,
                    approved=claims.approved,
                )
                .on_conflict_do_nothing()
                .returning(ScheduledFollowup.id)
            )
        return {"status": "scheduled", "followup_id": str(inserted or followup_id), "due_at": _iso(due_at)}

    async def list_followups(self, claims: RunTokenClaims) -> dict[str, Any]:
        async with self.sessions() as session, async_tenant_transaction(session, claims.org_id):
            conversation = await self._conversation(session, claims)
            rows = (
                await session.scalars(
                    select(ScheduledFollowup)
                    .where(
                        ScheduledFollowup.org_id == claims.org_id,
                        ScheduledFollowup.conversation_id == conversation.id,
                        ScheduledFollowup.status == FollowupStatus.SCHEDULED.value,
                    )
                    .order_by(ScheduledFollowup.due_at)
                    .limit(50)
                )
            ).all()
        return {"followups": [{"followup_id": str(f.id), "due_at": _iso(f.due_at), "reason": f.reason} for f in rows]}

    async def cancel_followup(self, claims: RunTokenClaims, *, followup_id: str) -> dict[str, Any]:
        try:
            target = uuid.UUID(followup_id)
        except ValueError:
            raise ToolFailure("followup_id must be one returned by crm_list_followups") from None
        if claims.dry_run:
            return {"status": "not_cancelled", "reason": "dry run"}
        async with self.sessions() as session, async_tenant_transaction(session, claims.org_id):
            conversation = await self._writable_conversation(session, claims)
            cancelled = await session.scalar(
                update(ScheduledFollowup)
                .where(
                    ScheduledFollowup.org_id == claims.org_id,
                    ScheduledFollowup.conversation_id == conversation.id,
                    ScheduledFollowup.id == target,
                    ScheduledFollowup.status == FollowupStatus.SCHEDULED.value,
                )
                .values(status=FollowupStatus.CANCELLED.value, cancelled_at=datetime.now(UTC))
                .returning(ScheduledFollowup.id)
            )
        if cancelled is None:
            raise ToolFailure("no scheduled follow-up with that id in this conversation")
        return {"status": "cancelled", "followup_id": followup_id}
