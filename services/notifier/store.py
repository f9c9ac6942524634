"""All SQL of the notifier. Each public method is one short tenant transaction that commits.

The order of those transactions *is* the delivery guarantee (docs/notifier.md):
``claim_run`` commits the delivery claims before any channel call, ``record_outcome``
commits what the channel answered afterwards.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from typing import Any

from sqlalchemy import TextClause, bindparam, event, func, or_, select, text, update
from sqlalchemy.dialects.postgresql import UUID as PG_UUID
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from services.notifier import undelivered
from services.notifier.channels import Destination
from services.notifier.metrics import MESSAGES_DELIVERED
from switchboard.contracts import HandoffTriggered, HumanMessageRequested, RunCompleted, SendTarget
from switchboard.crypto import CryptoError, KeyRing, Sealed
from switchboard.db.enums import ConversationStatus, MessageDeliveryStatus, MessageDirection, MessageSender
from switchboard.db.models import AiAgentRun, ChannelSession, Contact, Conversation, Message, WorkspaceDailyBrief
from switchboard.db.models.notifications import (
    DeliveryKind,
    DeliveryState,
    NotificationState,
    OrgNotification,
    OrgWebhook,
    RunDelivery,
    org_webhook_aad,
)
from switchboard.db.queued_messages import APPROVED, cancel_queued_messages
from switchboard.db.session import async_tenant_transaction
from switchboard.internal_chats import is_internal_chat
from switchboard.observability.scrubbing import scrub_text
from switchboard.rotation import channel_session_aad
from switchboard.run_outcomes import CONTACT_ERASED, NOT_ATTEMPTED, WITH_HUMANS

ERROR_MESSAGE_LIMIT = 500
# "Since ever": a person's own message is not withheld by a takeover (``_gate``'s first answer).
_EVER = datetime.min.replace(tzinfo=UTC)
# How long a channel session's route (and its opened API key) is reused before it is read again:
# a send per reply would otherwise cost a query and an AES-GCM open. A session's new API key or
# base URL reaches the sends this much later (docs/notifier.md "Routes").
ROUTE_TTL_S = 10.0
# The delivery error of a send through an archived number (docs/api.md ":archive").
ARCHIVED = "channel_session_archived"
# Why an org notification was not sent: no webhook set (skipped); a secret that does not open (failed).
NO_WEBHOOK = "no_webhook"
WEBHOOK_SECRET_UNREADABLE = "webhook_secret_unreadable"

_UUID = PG_UUID(as_uuid=True)

# The reply's message row, or the one an earlier delivery of the same event stored (the no-op
# ON CONFLICT DO UPDATE makes RETURNING give that row): one round trip either way.
_REPLY_INSERT = """
INSERT INTO messages AS m (id, org_id, conversation_id, channel_session_id, direction, sender, dedupe_key, body,
                           delivery_status, run_id, attributes)
VALUES (:id, :org_id, :conversation_id, :channel_session_id, :direction, :sender, :dedupe_key, :body,
        :delivery_status, :run_id, CAST(:attributes AS jsonb))
ON CONFLICT (channel_session_id, dedupe_key) DO UPDATE SET dedupe_key = m.dedupe_key
RETURNING m.id, m.body
"""
_REPLY_PARAMS = ("id", "org_id", "conversation_id", "channel_session_id", "run_id")
_RECORD_REPLY = text(_REPLY_INSERT).bindparams(*(bindparam(n, type_=_UUID) for n in _REPLY_PARAMS))

# Outbound messages the run's send tool queued, still pending, other than the reply itself.
_INTENTS_FROM = """
FROM messages AS i JOIN conversations AS cv ON cv.id = i.conversation_id
WHERE i.org_id = :org_id AND i.run_id = :run_id AND i.direction = 'outbound' AND i.delivery_status = 'pending'
  AND i.dedupe_key IS DISTINCT FROM :dedupe_key
"""
_INTENTS = text(
    f"SELECT i.id, i.channel_session_id, i.body, cv.chat_id {_INTENTS_FROM} ORDER BY i.created_at, i.id"
).bindparams(*(bindparam(n, type_=_UUID) for n in ("org_id", "run_id")))
# What an owner's approval queued after its run ended (``attributes.approved``, set by the tool
# server): only these. The run's own queued messages go with its completion — or, when the run
# was lost, its recovery attempt withdraws them (services/runner/superseded.py): an approval
# arriving meanwhile must not send them.
_APPROVED_INTENTS = text(
    f"SELECT i.id, i.channel_session_id, i.body, cv.chat_id {_INTENTS_FROM} AND i.attributes ? '{APPROVED}'"
    " ORDER BY i.created_at, i.id"
).bindparams(*(bindparam(n, type_=_UUID) for n in ("org_id", "run_id")))
# A run's claim in one round trip: its intents, oldest first, then its reply (recorded here).
# The intents part cannot see the row the CTE inserts (one snapshot); a reply stored by an
# earlier delivery of the event is excluded by its dedupe key, as in ``_INTENTS``.
_REPLY_AND_INTENTS = text(
    f"""
WITH reply AS ({_REPLY_INSERT})
SELECT 0 AS part, i.created_at, i.id, i.channel_session_id, i.body, cv.chat_id {_INTENTS_FROM}
UNION ALL
SELECT 1, NULL, reply.id, CAST(:channel_session_id AS uuid), reply.body, CAST(:chat_id AS text) FROM reply
ORDER BY part, created_at, id
"""
).bindparams(*(bindparam(n, type_=_UUID) for n in _REPLY_PARAMS))

# The claim also reads whether its number was archived since: routes are cached for
# ``ROUTE_TTL_S``, and a number given up must not send from the moment it is archived (its name
# on its WAHA server may be another session's already). Same round trip.
_ARCHIVED_SINCE = """EXISTS (SELECT 1 FROM channel_sessions AS cs
    WHERE cs.org_id = :org_id AND cs.id = :channel_session_id AND cs.archived_at IS NOT NULL)"""
_CLAIM = text(
    f"""
INSERT INTO run_deliveries (id, org_id, run_id, message_id, kind, channel, status)
VALUES (:id, :org_id, :run_id, :message_id, :kind, :channel, :status)
ON CONFLICT (message_id) DO NOTHING
RETURNING id, {_ARCHIVED_SINCE} AS archived
"""
).bindparams(*(bindparam(n, type_=_UUID) for n in ("id", "org_id", "run_id", "message_id", "channel_session_id")))
# A claim's move from waiting its turn to its attempt: won by one process only.
_START_SEND = text(
    f"""
UPDATE run_deliveries SET status = '{DeliveryState.SENDING.value}', updated_at = now()
WHERE org_id = :org_id AND message_id = :message_id AND status = '{DeliveryState.CLAIMED.value}'
RETURNING id
"""
).bindparams(*(bindparam(n, type_=_UUID) for n in ("org_id", "message_id")))
# A claim a redelivery finds still waiting its turn: nothing tried it, this delivery sends it.
_ADOPT_CLAIM = text(
    f"""
UPDATE run_deliveries SET updated_at = now()
WHERE org_id = :org_id AND message_id = :message_id AND status = '{DeliveryState.CLAIMED.value}'
RETURNING id, {_ARCHIVED_SINCE} AS archived
"""
).bindparams(*(bindparam(n, type_=_UUID) for n in ("org_id", "message_id", "channel_session_id")))

# What the channel answered, on the claim, the message and (for the reply) the run: one statement.
# WAHA echoes our own message as a webhook; ingest matches the echo to this message and may have
# given it the external id first (docs/api.md "Echoes"). A receipt ingested meanwhile (delivered,
# read) is the channel's word and stays: the send's answer never moves a status back.
_RECORD_OUTCOME = text(
    """
WITH delivery AS (
    UPDATE run_deliveries
    SET status = :delivery_state, attempts = :attempts, external_id = :external_id, error_code = :error_code,
        error_message = :error_message, completed_at = :completed_at, updated_at = now()
    WHERE org_id = :org_id AND message_id = :message_id
), message AS (
    UPDATE messages AS m
    SET delivery_status = CASE WHEN m.delivery_status IN ('delivered', 'read') THEN m.delivery_status
                               ELSE :message_status END,
        delivery_error = :error_code, updated_at = now(),
        external_id = CASE
            WHEN CAST(:external_id AS text) IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM messages AS other
                WHERE other.channel_session_id = m.channel_session_id AND other.external_id = :external_id)
            THEN :external_id ELSE m.external_id END
    WHERE m.org_id = :org_id AND m.id = :message_id
)
UPDATE ai_agent_runs SET outbound_message_id = :message_id, updated_at = now()
WHERE :is_reply AND org_id = :org_id AND id = :run_id
"""
).bindparams(*(bindparam(n, type_=_UUID) for n in ("org_id", "message_id", "run_id")))


def _reply_values(completed: RunCompleted) -> tuple[dict[str, Any], SendTarget] | None:
    """The reply's row to record, and where it goes; None when there is nothing to send or nobody
    to send it to (an internal conversation)."""
    target = completed.would_send_to
    text = (completed.final_text or "").strip()
    if target is None or not text or is_internal_chat(target.chat_id):
        return None
    values = {
        "id": uuid.uuid4(),
        "org_id": completed.org_id,
        "conversation_id": completed.conversation_id,
        "channel_session_id": target.channel_session_id,
        "direction": MessageDirection.OUTBOUND.value,
        "sender": MessageSender.AGENT.value,
        "dedupe_key": reply_dedupe_key(completed.run_id),
        "body": text,
        "delivery_status": MessageDeliveryStatus.PENDING.value,
        "run_id": completed.run_id,
        "attributes": json.dumps({"kind": DeliveryKind.REPLY.value, "agent_id": str(completed.agent_id)}),
    }
    return values, target


@dataclass(frozen=True)
class _Candidate:
    """An outbound message that may be claimed: the reply or an intent the send tool queued."""

    message_id: uuid.UUID
    channel_session_id: uuid.UUID
    text: str
    kind: DeliveryKind
    chat_id: str


class RouteCache:
    """Routes by (org, channel session) for ``ROUTE_TTL_S``; a miss reads through ``load``."""

    def __init__(self, ttl_s: float = ROUTE_TTL_S) -> None:
        self._ttl_s = ttl_s
        self._entries: dict[tuple[uuid.UUID, uuid.UUID], tuple[float, tuple[Route | None, str | None]]] = {}

    async def get(
        self,
        org_id: uuid.UUID,
        channel_session_id: uuid.UUID,
        load: Callable[[], Awaitable[tuple[Route | None, str | None]]],
    ) -> tuple[Route | None, str | None]:
        key = (org_id, channel_session_id)
        now = time.monotonic()
        cached = self._entries.get(key)
        if cached is not None and now - cached[0] < self._ttl_s:
            return cached[1]
        value = await load()
        if len(self._entries) > 10_000:
            self._entries.clear()
        self._entries[key] = (now, value)
        return value


def reply_dedupe_key(run_id: uuid.UUID) -> str:
    """The reply of a run is one ``messages`` row, whatever the number of deliveries of its event."""
    return f"run-reply:{run_id}"


@dataclass(frozen=True)
class Route:
    """How to reach a channel session: the plugin name and its destination (chat id still blank)."""

    channel: str
    session: Destination

    def to(self, chat_id: str) -> Destination:
        return replace(self.session, chat_id=chat_id)


@dataclass(frozen=True)
class Claimed:
    """An outbound message this process now owns the one send of."""

    message_id: uuid.UUID
    kind: DeliveryKind
    text: str
    chat_id: str
    route: Route | None
    # Why there is no route (deleted session, key that does not open): recorded as a permanent failure.
    route_error: str | None = None
    # Its claim is ``sending`` already (the first message of a claim); False: ``claimed``, waiting its
    # turn, and it must win ``start_send`` before its attempt (revision 0040).
    started: bool = True


@dataclass(frozen=True)
class RunClaims:
    """What a finished run's claim gave: the messages to send now, and the kinds of those withheld now."""

    claimed: list[Claimed]
    withheld: tuple[DeliveryKind, ...] = ()


@dataclass(frozen=True)
class RetryGate:
    """Before a retry: whether the message already went out (the channel's echo of an attempt whose
    answer was lost gave it its id: ingest's ``claim_own_echo``), its number was archived, or people
    own its conversation (took it over after the message was claimed, maybe handed back since)."""

    echoed_external_id: str | None = None
    archived: bool = False
    with_humans: bool = False


@dataclass(frozen=True)
class Notification:
    id: uuid.UUID
    event_id: uuid.UUID
    event_type: str
    payload: dict[str, Any]


class NotifierStore:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        keyring: KeyRing,
        *,
        waha_base_url: str,
        waha_api_key: str | None = None,
    ) -> None:
        self._sessions = sessions
        self._keyring = keyring
        self._waha_base_url = waha_base_url
        self._waha_api_key = waha_api_key
        self._routes = RouteCache()

    # ------------------------------------------------------------------ customer messages

    async def claim_run(self, completed: RunCompleted) -> RunClaims:
        """Record the reply, then claim it and the run's queued intents; commit before any send.

        A message whose claim already exists is not returned (another delivery of the same
        event handled it); a claim left ``sending`` by a process that stopped mid-send becomes
        ``unknown`` here — it is never sent again. While people own the conversation (a person
        took it over, or a handoff), nothing is claimed for sending: see ``_withhold``.
        """
        org_id = completed.org_id
        reply = _reply_values(completed)
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            with_humans, erased = await self._gate(session, org_id, completed.conversation_id, completed.started_at)
            if erased:
                # Erased after the run answered (docs/api.md "Erasing a contact"): the reply is
                # not stored (its text would be personal data again) and nothing is sent.
                await cancel_queued_messages(session, org_id, completed.run_id, CONTACT_ERASED, keep_approved=False)
                return RunClaims([])
            if reply is None:
                candidates = await self._intents(session, org_id, completed.run_id)
            else:
                values, target = reply
                rows = await session.execute(_REPLY_AND_INTENTS, {**values, "chat_id": target.chat_id})
                candidates = [
                    _Candidate(
                        r.id,
                        r.channel_session_id,
                        r.body,
                        DeliveryKind.REPLY if r.part else DeliveryKind.INTENT,
                        target.chat_id if r.part else r.chat_id,
                    )
                    for r in rows
                ]
            if with_humans:
                return RunClaims([], await self._withhold(session, org_id, completed.run_id, candidates))
            return RunClaims(await self._claim(session, org_id, completed.run_id, candidates))

    async def _gate(
        self, session: AsyncSession, org_id: uuid.UUID, conversation_id: uuid.UUID, run_started_at: datetime
    ) -> tuple[bool, bool]:
        """Whether people own the conversation, or took it over after the run started (and have
        handed it back since: the person answered meanwhile, the run's reply is stale); and whether
        its contact was erased. The row is share-locked until the claim commits, so a takeover
        (or an erasure) either comes first (and is seen) or waits for the claim."""
        row = (
            await session.execute(
                select(Conversation.status, Conversation.handoff_at, Contact.erased_at)
                .outerjoin(Contact, (Contact.org_id == Conversation.org_id) & (Contact.id == Conversation.contact_id))
                .where(Conversation.org_id == org_id, Conversation.id == conversation_id)
                .with_for_update(read=True, of=Conversation)
            )
        ).one_or_none()
        if row is None:
            return False, False
        taken_since = row.handoff_at is not None and row.handoff_at > run_started_at
        return row.status == ConversationStatus.HANDOFF.value or taken_since, row.erased_at is not None

    async def _withhold(
        self, session: AsyncSession, org_id: uuid.UUID, run_id: uuid.UUID, candidates: list[_Candidate]
    ) -> tuple[DeliveryKind, ...]:
        """A run that ended while people own the conversation sends nothing: a person took it over
        while the run was going (or queued behind it), and an agent's reply would talk over them.
        Each message is kept (people can read what the agent would have said) and claimed as
        ``failed`` with ``conversation_with_humans``, so no later delivery of the event sends it.
        Returns the kinds of the messages withheld now (none on a redelivery); the caller counts them
        once the transaction committed."""
        withheld: list[DeliveryKind] = []
        for candidate in candidates:
            won = await session.scalar(
                insert(RunDelivery)
                .values(
                    id=uuid.uuid4(),
                    org_id=org_id,
                    run_id=run_id,
                    message_id=candidate.message_id,
                    kind=candidate.kind.value,
                    channel="none",
                    status=DeliveryState.FAILED.value,
                    error_code=WITH_HUMANS,
                    completed_at=datetime.now(UTC),
                )
                .on_conflict_do_nothing(index_elements=[RunDelivery.message_id])
                .returning(RunDelivery.id)
            )
            if won is None:  # claimed before: waiting its turn, sent, or left mid-send by a stopped process
                if await _fail_waiting_claim(session, org_id, candidate.message_id, WITH_HUMANS):
                    withheld.append(candidate.kind)
                else:
                    await _expire_left_claim(session, org_id, candidate, "none")
                continue
            await session.execute(
                update(Message)
                .where(Message.org_id == org_id, Message.id == candidate.message_id)
                .values(delivery_status=MessageDeliveryStatus.FAILED.value, delivery_error=WITH_HUMANS)
            )
            withheld.append(candidate.kind)
        return tuple(withheld)

    async def claim_reply(self, completed: RunCompleted) -> list[Claimed]:
        """Record and claim the run's reply alone (a handoff's acknowledgement: its intents were cancelled)."""
        org_id = completed.org_id
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            reply = await self._record_reply(session, completed)
            return await self._claim(session, org_id, completed.run_id, [reply] if reply is not None else [])

    async def claim_intents(self, org_id: uuid.UUID, run_id: uuid.UUID) -> list[Claimed]:
        """Claim what the run's send tool queued after the run ended (an action the owner approved)."""
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            approved = await self._intents(session, org_id, run_id, _APPROVED_INTENTS)
            return await self._claim(session, org_id, run_id, approved)

    async def claim_human(self, requested: HumanMessageRequested) -> list[Claimed]:
        """Claim a person's message (stored by the API, still ``pending``): at most once, like a reply.
        Not once its contact was erased (between the person's send and this claim): the number in
        the record is the person's real one, and they asked to be forgotten — the message fails
        ``contact_erased`` (2026-12-05: "[erased]" went out to them)."""
        async with self._sessions() as session, async_tenant_transaction(session, requested.org_id):
            row = (
                await session.execute(
                    select(Message.id, Message.channel_session_id, Message.body, Message.conversation_id).where(
                        Message.org_id == requested.org_id,
                        Message.id == requested.message_id,
                        Message.sender == MessageSender.HUMAN.value,
                        Message.delivery_status == MessageDeliveryStatus.PENDING.value,
                    )
                )
            ).one_or_none()
            if row is None:
                return []  # unknown here, or already sent or failed: nothing to claim
            _, erased = await self._gate(session, requested.org_id, row.conversation_id, _EVER)
            if erased:
                await _mark_pending(session, requested.org_id, row.id, MessageDeliveryStatus.FAILED, CONTACT_ERASED)
                return []
            candidate = _Candidate(row.id, row.channel_session_id, row.body, DeliveryKind.HUMAN, requested.chat_id)
            return await self._claim(session, requested.org_id, None, [candidate])

    async def _claim(
        self, session: AsyncSession, org_id: uuid.UUID, run_id: uuid.UUID | None, candidates: list[_Candidate]
    ) -> list[Claimed]:
        """One ``run_deliveries`` claim per message, won at most once ever (unique message id).

        The first message returned is claimed ``sending`` (its attempt follows the commit); the
        others ``claimed``, until their turn (``start_send``). A claim that already exists is this
        delivery's only while still ``claimed`` (nothing tried it); one left ``sending`` by a stopped
        process becomes ``unknown``."""
        claimed: list[Claimed] = []
        for candidate in candidates:
            route, route_error = await self._routes.get(
                org_id,
                candidate.channel_session_id,
                lambda c=candidate: self._route(session, org_id, c.channel_session_id),  # type: ignore[misc]
            )
            first = not claimed
            claim = (
                await session.execute(
                    _CLAIM,
                    {
                        "id": uuid.uuid4(),
                        "org_id": org_id,
                        "run_id": run_id,
                        "message_id": candidate.message_id,
                        "channel_session_id": candidate.channel_session_id,
                        "kind": candidate.kind.value,
                        "channel": route.channel if route else "none",
                        "status": (DeliveryState.SENDING if first else DeliveryState.CLAIMED).value,
                    },
                )
            ).one_or_none()
            started = claim is not None and first
            if claim is None:
                adopt = {
                    "org_id": org_id,
                    "message_id": candidate.message_id,
                    "channel_session_id": candidate.channel_session_id,
                }
                claim = (await session.execute(_ADOPT_CLAIM, adopt)).one_or_none()
                if claim is None:
                    await _expire_left_claim(session, org_id, candidate, route.channel if route else "none")
                    continue
            if claim.archived:  # archived within the route cache's life
                route, route_error = None, ARCHIVED
            claimed.append(
                Claimed(
                    candidate.message_id,
                    candidate.kind,
                    candidate.text,
                    candidate.chat_id,
                    route,
                    route_error,
                    started=started,
                )
            )
        return claimed

    async def keep_claims(self, org_id: uuid.UUID, message_ids: list[uuid.UUID]) -> None:
        """The claims waiting behind a retry are still this notifier's: refreshed at each attempt, so
        the sweep (``NOTIFIER_STALE_CLAIM_S``) never takes a live retry's followers for a crashed
        one's — chained retries in a long outage outlast the stale age of one."""
        if not message_ids:
            return
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            await session.execute(
                update(RunDelivery)
                .where(
                    RunDelivery.org_id == org_id,
                    RunDelivery.message_id.in_(message_ids),
                    RunDelivery.status == DeliveryState.CLAIMED.value,
                )
                .values(updated_at=func.now())
            )

    async def start_send(self, org_id: uuid.UUID, message_id: uuid.UUID) -> bool:
        """Move a claim waiting its turn to ``sending``, just before its attempt; False when another
        process did (a redelivery's, or the one that lost the partition), or it ended meanwhile."""
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            return await session.scalar(_START_SEND, {"org_id": org_id, "message_id": message_id}) is not None

    async def _record_reply(self, session: AsyncSession, completed: RunCompleted) -> _Candidate | None:
        reply = _reply_values(completed)
        if reply is None:
            return None
        values, target = reply
        row = (await session.execute(_RECORD_REPLY, values)).one()
        return _Candidate(row.id, target.channel_session_id, row.body, DeliveryKind.REPLY, target.chat_id)

    async def _intents(
        self, session: AsyncSession, org_id: uuid.UUID, run_id: uuid.UUID, query: TextClause = _INTENTS
    ) -> list[_Candidate]:
        """Outbound messages the agent's send tool queued during the run (``query``: all, or the
        approved ones), oldest first."""
        rows = await session.execute(
            query, {"org_id": org_id, "run_id": run_id, "dedupe_key": reply_dedupe_key(run_id)}
        )
        return [_Candidate(r.id, r.channel_session_id, r.body, DeliveryKind.INTENT, r.chat_id) for r in rows]

    async def _route(
        self, session: AsyncSession, org_id: uuid.UUID, channel_session_id: uuid.UUID
    ) -> tuple[Route | None, str | None]:
        row = (
            await session.execute(
                select(
                    ChannelSession.id,
                    ChannelSession.provider,
                    ChannelSession.base_url,
                    ChannelSession.external_session,
                    ChannelSession.api_key_ciphertext,
                    ChannelSession.api_key_iv,
                    ChannelSession.api_key_tag,
                    ChannelSession.api_key_key_id,
                    ChannelSession.archived_at,
                ).where(ChannelSession.org_id == org_id, ChannelSession.id == channel_session_id)
            )
        ).one_or_none()
        if row is None:
            return None, "channel_session_missing"
        if row.archived_at is not None:
            # A number given up: its name on its WAHA server may be another session's now, and a
            # send by name would go out through that number (docs/api.md ":archive").
            return None, ARCHIVED
        secret: str | None = None
        if row.base_url is None and self._waha_api_key:
            # The platform's WAHA is the operator's: its key, never one a tenant stored (which
            # would be every tenant holding the key to the shared server).
            secret = self._waha_api_key
        elif row.api_key_ciphertext is not None:
            assert row.api_key_iv is not None and row.api_key_tag is not None and row.api_key_key_id is not None
            sealed = Sealed(
                bytes(row.api_key_ciphertext), bytes(row.api_key_iv), bytes(row.api_key_tag), row.api_key_key_id
            )
            try:
                secret = self._keyring.open(sealed, aad=channel_session_aad("api_key", org_id, row.id)).decode()
            except CryptoError:
                return None, "channel_api_key_unreadable"
        return Route(
            row.provider, Destination(row.base_url or self._waha_base_url, row.external_session, "", secret)
        ), None

    async def record_outcome(
        self,
        org_id: uuid.UUID,
        run_id: uuid.UUID | None,
        claimed: Claimed,
        *,
        attempts: int,
        external_id: str | None,
        error_code: str | None,
        error_message: str | None,
    ) -> Notification | None:
        """What the channel answered, on the claim, the message and (for the reply) the run; for a
        message the channel did not take, the humans' ``message.undelivered`` notice (to send)."""
        delivered = error_code is None
        message = None if error_message is None else scrub_text(error_message)[:ERROR_MESSAGE_LIMIT]
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            await session.execute(
                _RECORD_OUTCOME,
                {
                    "org_id": org_id,
                    "message_id": claimed.message_id,
                    "run_id": run_id,
                    "is_reply": claimed.kind is DeliveryKind.REPLY,
                    "delivery_state": (DeliveryState.SENT if delivered else DeliveryState.FAILED).value,
                    "attempts": attempts,
                    "external_id": external_id,
                    "error_code": error_code,
                    "error_message": message,
                    "completed_at": datetime.now(UTC),
                    "message_status": (MessageDeliveryStatus.SENT if delivered else MessageDeliveryStatus.FAILED).value,
                },
            )
            if delivered or error_code == WITH_HUMANS:
                return None  # sent, or withheld from people who are answering themselves
            return await self._undelivered_notice(
                session, org_id, run_id, claimed, outcome="failed", error_code=error_code, attempts=attempts
            )

    async def retry_gate(self, org_id: uuid.UUID, message_id: uuid.UUID) -> RetryGate:
        """What a retry waiting its backoff must know before it sends again (one read, not locked: a
        takeover or an archive while the attempt is on the wire does not stop it)."""
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            row = (
                await session.execute(
                    select(
                        Message.external_id,
                        ChannelSession.archived_at,
                        or_(
                            Conversation.status == ConversationStatus.HANDOFF.value,
                            Conversation.handoff_at > Message.created_at,
                        ).label("with_humans"),
                    )
                    .select_from(Message)
                    .join(Conversation, Conversation.id == Message.conversation_id)
                    .outerjoin(ChannelSession, ChannelSession.id == Message.channel_session_id)
                    .where(Message.org_id == org_id, Message.id == message_id)
                )
            ).one_or_none()
            if row is None:
                return RetryGate()
            return RetryGate(
                echoed_external_id=row.external_id,
                archived=row.archived_at is not None,
                with_humans=bool(row.with_humans),
            )

    async def record_interrupted(
        self, org_id: uuid.UUID, run_id: uuid.UUID | None, claimed: Claimed, *, attempts: int
    ) -> Notification | None:
        """A claim whose retries a stop cut short: ``unknown`` (an attempt may have reached the channel),
        never sent again — as a claim found ``sending`` on redelivery; and the humans' notice."""
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            interrupted = await session.execute(
                update(RunDelivery)
                .where(
                    RunDelivery.org_id == org_id,
                    RunDelivery.message_id == claimed.message_id,
                    RunDelivery.status == DeliveryState.SENDING.value,
                )
                .values(status=DeliveryState.UNKNOWN.value, attempts=attempts, error_code="interrupted")
            )
            if not getattr(interrupted, "rowcount", 0):
                return None
            await _mark_unknown(session, org_id, claimed.message_id)
            return await self._undelivered_notice(
                session, org_id, run_id, claimed, outcome="unknown", error_code="interrupted", attempts=attempts
            )

    async def record_not_attempted(
        self, org_id: uuid.UUID, run_id: uuid.UUID | None, claimed: Claimed
    ) -> Notification | None:
        """A claim a stop found still waiting its turn (behind a retry): ``failed`` with
        ``interrupted_before_send`` — certainly not sent, never sent later, and people may send it
        again; and the humans' notice."""
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            if not await _fail_waiting_claim(session, org_id, claimed.message_id, NOT_ATTEMPTED):
                return None
            return await self._undelivered_notice(
                session, org_id, run_id, claimed, outcome="failed", error_code=NOT_ATTEMPTED, attempts=0
            )

    async def _undelivered_notice(
        self,
        session: AsyncSession,
        org_id: uuid.UUID,
        run_id: uuid.UUID | None,
        claimed: Claimed,
        *,
        outcome: str,
        error_code: str | None,
        attempts: int,
    ) -> Notification | None:
        """The ``message.undelivered`` notification of ``claimed``, in the caller's transaction."""
        row = (
            await session.execute(
                select(Message.conversation_id, Message.channel_session_id, Conversation.contact_id)
                .join(Conversation, Conversation.id == Message.conversation_id)
                .where(Message.org_id == org_id, Message.id == claimed.message_id)
            )
        ).one_or_none()
        if row is None:
            return None
        body = undelivered.payload(
            message_id=claimed.message_id,
            kind=claimed.kind.value,
            run_id=run_id,
            conversation_id=row.conversation_id,
            contact_id=row.contact_id,
            channel_session_id=row.channel_session_id,
            outcome=outcome,
            error_code=error_code,
            attempts=attempts,
        )
        key = undelivered.dedupe_key(claimed.message_id)
        await self._insert_notification(session, org_id, key, undelivered.EVENT_TYPE, body)
        return await self._pending_notification(session, org_id, key)

    async def expire_stale_claims(self, older_than_s: float) -> int:
        """Claims of every org still ``sending`` after ``older_than_s``: their notifier stopped without
        recording them (a crash during a retry's backoff); ``unknown`` now. Claims still ``claimed``
        (they waited behind that retry, never attempted): ``failed``, ``interrupted_before_send``.
        Needs no tenant: a SECURITY DEFINER function that scopes itself org by org (revisions 0020,
        0040)."""
        async with self._sessions() as session, session.begin():
            expired = await session.scalar(
                text("SELECT expire_stale_deliveries(:older_than_s)"), {"older_than_s": int(older_than_s)}
            )
        return int(expired or 0)

    async def cancel_intents(self, org_id: uuid.UUID, run_id: uuid.UUID, reason: str) -> int:
        """Queued intents of a run that must not be sent (handoff, failure): marked failed, never claimed.
        Not what an owner approved on the run (``attributes.approved``): that is the owner's act, not
        the run's, and goes out with the approval (``claim_intents``) however the run ended."""
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            return await cancel_queued_messages(session, org_id, run_id, reason, keep_approved=True)

    # ------------------------------------------------------------------ humans

    async def hand_to_humans(self, handoff: HandoffTriggered, payload: dict[str, Any]) -> Notification | None:
        """Assign the conversation to humans and create the handoff notification, atomically.

        The notification row doubles as the receipt of the handoff: a redelivered event (even
        after a human handed the conversation back) finds it and changes nothing. Returns the
        notification still to send, or None when it was already sent or given up on.
        """
        org_id = handoff.org_id
        key = f"handoff:{handoff.run_id}"
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            created = await self._insert_notification(session, org_id, key, "conversation.handoff", payload)
            if created:
                # Already with humans (a person took it over while this run was still going):
                # their assignment and handoff time stay. Taken over since the run started and
                # handed back already: the handback is the newer word, the agents keep it (as
                # the dispatcher decides, docs/dispatcher.md "human_owned").
                started = (
                    select(AiAgentRun.started_at)
                    .where(AiAgentRun.org_id == org_id, AiAgentRun.id == handoff.run_id)
                    .scalar_subquery()
                )
                await session.execute(
                    update(Conversation)
                    .where(
                        Conversation.org_id == org_id,
                        Conversation.id == handoff.conversation_id,
                        Conversation.status != ConversationStatus.HANDOFF.value,
                        or_(Conversation.handoff_at.is_(None), started.is_(None), Conversation.handoff_at <= started),
                    )
                    .values(
                        status=ConversationStatus.HANDOFF.value,
                        handoff_at=datetime.now(UTC),
                        assigned_user_id=None,
                    )
                )
            return await self._pending_notification(session, org_id, key)

    async def claim_notification(
        self, org_id: uuid.UUID, dedupe_key: str, event_type: str, payload: dict[str, Any]
    ) -> Notification | None:
        """The notification for ``dedupe_key`` if it still has to be sent (created on first sight)."""
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            await self._insert_notification(session, org_id, dedupe_key, event_type, payload)
            return await self._pending_notification(session, org_id, dedupe_key)

    async def create_notification(
        self, org_id: uuid.UUID, dedupe_key: str, event_type: str, payload: dict[str, Any]
    ) -> Notification | None:
        """The notification for ``dedupe_key`` when this call created it; None when it existed already."""
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            if not await self._insert_notification(session, org_id, dedupe_key, event_type, payload):
                return None
            return await self._pending_notification(session, org_id, dedupe_key)

    async def due_digests(
        self, now: datetime, limit: int, after: uuid.UUID | None = None
    ) -> list[tuple[uuid.UUID, date]]:
        """Orgs whose morning digest push is due (``list_due_digests``, revision 0033): ids and
        days, in id order after ``after`` (a page)."""
        async with self._sessions() as session:
            rows = await session.execute(
                text("SELECT org_id, day FROM list_due_digests(:now, :after, :limit)"),
                {"now": now, "after": after, "limit": limit},
            )
            return [(org_id, day) for org_id, day in rows]

    async def digests(self, org_id: uuid.UUID, day: date) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The stored Home digests of ``day`` and of the day before (None where the brief wrote none)."""
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            rows = await session.execute(
                select(WorkspaceDailyBrief.day, WorkspaceDailyBrief.digest).where(
                    WorkspaceDailyBrief.org_id == org_id,
                    WorkspaceDailyBrief.day.in_([day, day - timedelta(days=1)]),
                )
            )
            by_day = {found: dict(digest) for found, digest in rows}
        return by_day.get(day), by_day.get(day - timedelta(days=1))

    async def _insert_notification(
        self, session: AsyncSession, org_id: uuid.UUID, key: str, event_type: str, payload: dict[str, Any]
    ) -> bool:
        inserted = await session.scalar(
            insert(OrgNotification)
            .values(org_id=org_id, dedupe_key=key, event_type=event_type, event_id=uuid.uuid4(), payload=payload)
            .on_conflict_do_nothing(index_elements=[OrgNotification.org_id, OrgNotification.dedupe_key])
            .returning(OrgNotification.id)
        )
        return inserted is not None

    async def _pending_notification(self, session: AsyncSession, org_id: uuid.UUID, key: str) -> Notification | None:
        row = await session.scalar(
            select(OrgNotification).where(OrgNotification.org_id == org_id, OrgNotification.dedupe_key == key)
        )
        if row is None or row.status != NotificationState.PENDING.value:
            return None
        return Notification(row.id, row.event_id, row.event_type, dict(row.payload))

    async def org_webhook(self, org_id: uuid.UUID) -> Destination | str:
        """The org's webhook, or why there is none to call: ``no_webhook`` (none set: skipped), or
        ``WEBHOOK_SECRET_UNREADABLE`` (its secret does not open — its key was removed from the
        ring, or the row was tampered with: failed, never left ``pending`` for every sweep)."""
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            row = await session.scalar(select(OrgWebhook).where(OrgWebhook.org_id == org_id))
        if row is None:
            return NO_WEBHOOK
        sealed = Sealed(bytes(row.secret_ciphertext), bytes(row.secret_iv), bytes(row.secret_tag), row.secret_key_id)
        try:
            secret = self._keyring.open(sealed, aad=org_webhook_aad(org_id, row.id)).decode()
        except CryptoError:
            return WEBHOOK_SECRET_UNREADABLE
        return Destination(base_url=row.url, session="", chat_id="", secret=secret)

    async def stale_notifications(self, older_than_s: float, limit: int = 100) -> list[tuple[uuid.UUID, Notification]]:
        """Notifications still ``pending`` after ``older_than_s`` (``list_pending_notifications``)."""
        async with self._sessions() as session:
            found = (
                await session.execute(
                    text("SELECT org_id, notification_id FROM list_pending_notifications(:s, :l)"),
                    {"s": int(older_than_s), "l": limit},
                )
            ).all()
        stale: list[tuple[uuid.UUID, Notification]] = []
        for org_id, notification_id in found:
            async with self._sessions() as session, async_tenant_transaction(session, org_id):
                row = await session.get(OrgNotification, notification_id)
            if row is not None and row.status == NotificationState.PENDING.value:
                stale.append((org_id, Notification(row.id, row.event_id, row.event_type, dict(row.payload))))
        return stale

    async def finish_notification(
        self,
        org_id: uuid.UUID,
        notification_id: uuid.UUID,
        state: NotificationState,
        *,
        attempts: int,
        error_code: str | None,
    ) -> None:
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            await session.execute(
                update(OrgNotification)
                .where(OrgNotification.org_id == org_id, OrgNotification.id == notification_id)
                .values(
                    status=state.value,
                    attempts=OrgNotification.attempts + attempts,
                    error_code=error_code,
                    sent_at=datetime.now(UTC) if state is NotificationState.SENT else None,
                )
            )


async def _expire_left_claim(session: AsyncSession, org_id: uuid.UUID, candidate: _Candidate, channel: str) -> None:
    """A claim found ``sending`` on a redelivery was left mid-send by a process that stopped: it
    becomes ``unknown`` now (it may have reached the channel), never sent again."""
    interrupted = await session.execute(
        update(RunDelivery)
        .where(RunDelivery.message_id == candidate.message_id, RunDelivery.status == DeliveryState.SENDING.value)
        .values(status=DeliveryState.UNKNOWN.value, error_code="interrupted")
    )
    if getattr(interrupted, "rowcount", 0):
        await _mark_unknown(session, org_id, candidate.message_id)
        _count_on_commit(session, channel, candidate.kind.value, "unknown")


async def _fail_waiting_claim(session: AsyncSession, org_id: uuid.UUID, message_id: uuid.UUID, error_code: str) -> bool:
    """End a claim still waiting its turn (never attempted) ``failed`` with ``error_code``, and its
    message with it; False when it is not ``claimed`` (begun, or ended, elsewhere)."""
    ended = await session.scalar(
        update(RunDelivery)
        .where(
            RunDelivery.org_id == org_id,
            RunDelivery.message_id == message_id,
            RunDelivery.status == DeliveryState.CLAIMED.value,
        )
        .values(status=DeliveryState.FAILED.value, error_code=error_code, completed_at=datetime.now(UTC))
        .returning(RunDelivery.id)
    )
    if ended is None:
        return False
    await _mark_pending(session, org_id, message_id, MessageDeliveryStatus.FAILED, error_code)
    return True


def _count_on_commit(session: AsyncSession, channel: str, kind: str, outcome: str) -> None:
    """Count an outcome when its transaction commits: a claim rolled back (and redelivered) counts
    nothing, so the redelivery that records it again counts it once."""
    counter = MESSAGES_DELIVERED.labels(channel, kind, outcome)
    event.listen(session.sync_session, "after_commit", lambda _session: counter.inc(), once=True)


async def _mark_unknown(session: AsyncSession, org_id: uuid.UUID, message_id: uuid.UUID) -> None:
    """The message of a claim that became ``unknown`` says so in the inbox (it stayed ``pending``);
    a later receipt from the channel still advances it (revision 0031)."""
    await _mark_pending(session, org_id, message_id, MessageDeliveryStatus.UNKNOWN)


async def _mark_pending(
    session: AsyncSession,
    org_id: uuid.UUID,
    message_id: uuid.UUID,
    status: MessageDeliveryStatus,
    error_code: str | None = None,
) -> None:
    """A message still ``pending`` takes its claim's end (a receipt ingested meanwhile stays)."""
    values: dict[str, Any] = {"delivery_status": status.value}
    if error_code is not None:
        values["delivery_error"] = error_code
    await session.execute(
        update(Message)
        .where(
            Message.org_id == org_id,
            Message.id == message_id,
            Message.delivery_status == MessageDeliveryStatus.PENDING.value,
        )
        .values(**values)
    )
