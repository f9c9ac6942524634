"""WAHA webhook rules: who sent it (route + signature), then idempotent ingest and dispatch.

Order of checks, and why:

1. the envelope parses (else 422): it names the session, which decides the secret;
2. the session exists and the body's HMAC-SHA512 matches its secret (else 401,
   the same answer for an unknown session and a bad signature);
3. only then the event-specific payload is validated (422) and acted upon.

Ingest is idempotent on (channel session, ``payload.id``): the message insert is
``ON CONFLICT DO NOTHING``, and only the delivery that actually inserted the row
writes the ``dispatch_requested`` outbox record, in the same transaction. A
repeated delivery answers ``duplicate: true`` with the stored message's id.

Functions take a sync ``Session`` whose transaction the caller owns and never commit.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from services.api.channels import alerts
from services.api.channels.service import open_sealed
from services.api.core.errors import ApiError, Unauthorized, ValidationFailed
from services.api.webhooks import phone, repository, slash
from services.api.webhooks.schemas import (
    ACK_EVENT,
    MESSAGE_EVENTS,
    SESSION_STATUS_EVENT,
    WahaAck,
    WahaEvent,
    WahaMessage,
    WahaSessionStatus,
    WebhookResult,
)
from switchboard.contracts import DispatchRequested, InboundMessage, Serde, Topics, WakeContext, WakeReason
from switchboard.crypto import KeyRing
from switchboard.db.enums import (
    ChannelProvider,
    ChannelSessionStatus,
    ConversationStatus,
    MessageContentType,
    MessageDeliveryStatus,
    MessageDirection,
    MessageSender,
)
from switchboard.db.lookups import ChannelSessionRoute
from switchboard.db.outbox import OutboxBatch
from switchboard.observability.logging import get_logger
from switchboard.slash_commands import is_run_command, names_a_command

log = get_logger(__name__)

SIGNATURE_ALGORITHM = "sha512"
BAD_SIGNATURE = "The webhook signature is missing or does not match"
# Stable event ids: the dispatch of message M is always the same event, whoever writes it.
DISPATCH_EVENT_NAMESPACE = uuid.UUID("6f1c3f52-0d55-4f3e-9a52-1f0c2f8d7a10")

_PHONE_CHAT = re.compile(r"^([1-9][0-9]{6,14})@(?:c\.us|s\.whatsapp\.net)$")
# Status updates and channels: not conversations anyone answers.
_BROADCAST_SUFFIXES = ("@broadcast", "@newsletter")
_WAHA_STATUSES = {
    "STARTING": ChannelSessionStatus.STARTING,
    "SCAN_QR_CODE": ChannelSessionStatus.SCAN_QR,
    "WORKING": ChannelSessionStatus.WORKING,
    "STOPPED": ChannelSessionStatus.STOPPED,
    "FAILED": ChannelSessionStatus.FAILED,
}
# WAHA's ack levels: 1 server, 2 device, 3 read, 4 played (a voice note listened to), -1 error.
_ACK_LEVELS = {
    -1: MessageDeliveryStatus.FAILED,
    1: MessageDeliveryStatus.SENT,
    2: MessageDeliveryStatus.DELIVERED,
    3: MessageDeliveryStatus.READ,
    4: MessageDeliveryStatus.READ,
}
_ACK_NAMES = {"ERROR": -1, "PENDING": 0, "SERVER": 1, "DEVICE": 2, "READ": 3, "PLAYED": 4}
# A secret no session has: unknown sessions still pay for one HMAC, so timing says little.
_DECOY_SECRET = b"switchboard-decoy-webhook-secret"


@dataclass(frozen=True)
class Delivery:
    """One webhook request as received."""

    raw: bytes
    event: WahaEvent
    signature: str | None
    algorithm: str | None
    request_id: str | None
    # The session the per-session URL names (``/webhooks/waha/{id}``); None: routed by the body's name.
    channel_session_id: uuid.UUID | None = None


class SessionMismatch(ValidationFailed):
    """A per-session URL received a delivery naming another session: WAHA is set up with the
    wrong URL, and replies would go to a session that never wrote."""

    code = "session_mismatch"


def signature_matches(secret: bytes, body: bytes, signature: str | None, algorithm: str | None) -> bool:
    """Constant-time check of WAHA's ``X-Webhook-Hmac`` (hex HMAC-SHA512 of the raw body)."""
    expected = hmac.new(secret, body, hashlib.sha512).hexdigest().encode()
    if algorithm is not None and algorithm.strip().lower() != SIGNATURE_ALGORITHM:
        return False
    if not signature:
        return False
    return hmac.compare_digest(expected, signature.strip().lower().encode())


def sign(secret: str | bytes, body: bytes) -> str:
    """What WAHA sends in ``X-Webhook-Hmac`` (tests, the benchmark and docs use it)."""
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, body, hashlib.sha512).hexdigest()


Outcome = WebhookResult | ApiError
"""What one delivery of a batch came to: its answer, or the error it is refused with."""


@dataclass(frozen=True, slots=True)
class _Planned:
    """A verified delivery's database work, to run once its org is the transaction's tenant."""

    index: int
    chat_id: str  # orders the batch's locks (see ``handle_deliveries``)
    apply: Callable[[Session, OutboxBatch], WebhookResult]


def handle_deliveries(
    session: Session, *, keyring: KeyRing, serde: Serde, deliveries: Sequence[Delivery]
) -> list[Outcome]:
    """Authenticate a batch of deliveries and act on each, in the caller's one transaction.

    Round trips are per batch where they can be: one statement routes the sessions the
    per-session URLs name, one those the bodies name on the name-routed URL, one per org sets
    the tenant and reads its sessions' secrets; then each delivery's own statements. A
    delivery refused before its first write (bad signature, invalid payload, a per-session URL
    given another session's delivery) gets its error as its outcome and the others go on; an
    exception raised once writes have begun is raised out of here, and the caller rolls the
    whole batch back
    (``group_commit``). Orgs, then sessions, then chats are visited in one fixed order, so
    two batches that lock the same conversations lock them in the same order (no deadlock);
    the deliveries of one chat keep their arrival order.
    """
    provider = ChannelProvider.WAHA.value
    by_name = repository.routes(
        session, provider, (d.event.session for d in deliveries if d.channel_session_id is None)
    )
    by_id = repository.routes_by_id(session, provider, (d.channel_session_id for d in deliveries))
    outcomes: list[Outcome | None] = [None] * len(deliveries)
    outbox = OutboxBatch()  # the batch's dispatch records: one insert at the end
    by_org: dict[uuid.UUID, list[tuple[int, ChannelSessionRoute]]] = {}
    for index, delivery in enumerate(deliveries):
        route: ChannelSessionRoute | None
        if delivery.channel_session_id is not None:  # never routed by the body's name instead
            named = by_id.get(delivery.channel_session_id)
            route = named[0] if named is not None else None
        else:
            route = by_name.get(delivery.event.session)
        if route is None:
            signature_matches(_DECOY_SECRET, delivery.raw, delivery.signature, delivery.algorithm)
            outcomes[index] = Unauthorized(BAD_SIGNATURE)
        else:
            by_org.setdefault(route.org_id, []).append((index, route))
    for org_id in sorted(by_org, key=str):
        members = by_org[org_id]
        repository.set_tenant(session, org_id)
        sealed = repository.session_secrets(session, org_id, {route.channel_session_id for _, route in members})
        planned: list[tuple[str, _Planned]] = []
        for index, route in members:
            delivery = deliveries[index]
            secret = _open_secret(keyring, route, sealed.get(route.channel_session_id))
            if secret is None or not signature_matches(secret, delivery.raw, delivery.signature, delivery.algorithm):
                outcomes[index] = Unauthorized(BAD_SIGNATURE)
                continue
            expected_name = by_id[route.channel_session_id][1] if delivery.channel_session_id is not None else None
            if expected_name is not None and delivery.event.session != expected_name:
                outcomes[index] = SessionMismatch(
                    "This webhook URL belongs to another WAHA session than the one the delivery names",
                    details={"expected_session": expected_name, "session": delivery.event.session},
                )
                continue
            try:
                plan = _plan(index, route, delivery, serde)
            except ApiError as exc:
                outcomes[index] = exc
                continue
            if isinstance(plan, WebhookResult):
                outcomes[index] = plan
            else:
                planned.append((str(route.channel_session_id), plan))
        for _, plan in sorted(planned, key=lambda item: (item[0], item[1].chat_id)):
            outcomes[plan.index] = plan.apply(session, outbox)
        session.flush()  # ORM writes (a /todo item) go out under their own org's tenant
    outbox.flush(session)
    answered = [outcome for outcome in outcomes if outcome is not None]
    if len(answered) != len(deliveries):  # a path above that answers nothing is a bug, never a silent skip
        raise RuntimeError("a webhook delivery of the batch got no outcome")
    return answered


def _open_secret(keyring: KeyRing, route: ChannelSessionRoute, stored: repository.SessionSecret | None) -> bytes | None:
    if stored is None:
        return None
    return open_sealed(
        keyring,
        "webhook_secret",
        org_id=route.org_id,
        session_id=route.channel_session_id,
        ciphertext=stored.ciphertext,
        iv=stored.iv,
        tag=stored.tag,
        key_id=stored.key_id,
    )


def _plan(index: int, route: ChannelSessionRoute, delivery: Delivery, serde: Serde) -> _Planned | WebhookResult:
    """Validate an authenticated delivery's payload (no database): its work, or its answer already."""
    event = delivery.event
    if event.event in MESSAGE_EVENTS:
        return _plan_message(index, route, event, serde, delivery.request_id)
    if event.event == SESSION_STATUS_EVENT:
        return _plan_session_status(index, route, event, serde, delivery.request_id)
    if event.event == ACK_EVENT:
        return _plan_delivery_ack(index, route, event)
    return WebhookResult(message_id=None, dispatched=False, duplicate=False, reason="event_ignored")


def _invalid(what: str, exc: ValidationError) -> ValidationFailed:
    problems = [
        {"loc": ["payload", *(str(p) for p in err.get("loc", ()))], "msg": str(err.get("msg", "")), "type": err["type"]}
        for err in exc.errors(include_url=False, include_input=False)
    ]
    return ValidationFailed(f"The {what} payload is invalid", details={"errors": problems})


def _plan_session_status(
    index: int, route: ChannelSessionRoute, event: WahaEvent, serde: Serde, request_id: str | None
) -> _Planned | WebhookResult:
    try:
        payload = WahaSessionStatus.model_validate(event.payload)
    except ValidationError as exc:
        raise _invalid("session.status", exc) from exc
    status = _WAHA_STATUSES.get(payload.status.upper())
    if status is None:
        return WebhookResult(message_id=None, dispatched=False, duplicate=False, reason="event_ignored")

    reported_at = _epoch(event.timestamp)

    def apply(session: Session, _outbox: OutboxBatch) -> WebhookResult:
        return record_session_status(
            session, route=route, status=status, reported_at=reported_at, serde=serde, request_id=request_id
        )

    return _Planned(index, "", apply)


def record_session_status(
    session: Session,
    *,
    route: ChannelSessionRoute,
    status: ChannelSessionStatus,
    reported_at: datetime | None,
    serde: Serde,
    request_id: str | None,
) -> WebhookResult:
    """Follow WAHA's session state: only ``working`` sessions can be bound when an agent is published.
    A working session going down is announced to the owner (``channels.alerts``). A report older
    than the one the status came from (``reported_at``: WAHA's clock) changes nothing — a retried
    or replayed delivery set a number back to a state it had left."""
    change = repository.set_session_status(session, route.org_id, route.channel_session_id, status.value, reported_at)
    if change is None:
        return WebhookResult(message_id=None, dispatched=False, duplicate=False, reason="session_status_stale")
    if alerts.is_disconnection(change.previous, status):
        alerts.announce_disconnected(
            session,
            serde,
            org_id=route.org_id,
            channel_session_id=route.channel_session_id,
            label=change.label,
            phone_number=change.phone_number,
            status=status,
            request_id=request_id,
        )
        log.warning(
            "channel session disconnected",
            extra={"organization_id": str(route.org_id), "channel_session_id": str(route.channel_session_id)},
        )
    return WebhookResult(message_id=None, dispatched=False, duplicate=False, reason="session_status")


def _plan_delivery_ack(index: int, route: ChannelSessionRoute, event: WahaEvent) -> _Planned | WebhookResult:
    """Move an own message's ``delivery_status`` forward: the inbox shows what was delivered and read.

    A receipt for a message not (yet) known by its channel id changes nothing: the notifier
    stores the id when the send answers, and the next receipt finds it."""
    try:
        payload = WahaAck.model_validate(event.payload)
    except ValidationError as exc:
        raise _invalid("message.ack", exc) from exc
    level = payload.ack if payload.ack is not None else _ACK_NAMES.get((payload.ack_name or "").upper())
    status = _ACK_LEVELS.get(level) if level is not None else None
    if status is None:
        return WebhookResult(message_id=None, dispatched=False, duplicate=False, reason="delivery_ack")

    def apply(session: Session, _outbox: OutboxBatch) -> WebhookResult:
        advanced = repository.advance_delivery_status(
            session,
            org_id=route.org_id,
            channel_session_id=route.channel_session_id,
            external_id=payload.id,
            status=status.value,
        )
        return WebhookResult(message_id=advanced, dispatched=False, duplicate=False, reason="delivery_ack")

    # The receipt names no chat: ordered first within its session.
    return _Planned(index, "", apply)


def _occurred_at(timestamp: float | None) -> datetime:
    """WAHA message timestamps are seconds; milliseconds are accepted; nonsense means now."""
    return _epoch(timestamp) or datetime.now(UTC)


def _epoch(timestamp: float | None) -> datetime | None:
    """A WAHA timestamp (seconds, or milliseconds: the envelope's) as a time; None when absent or nonsense."""
    if timestamp is None:
        return None
    seconds = timestamp / 1000 if timestamp > 10**11 else timestamp
    try:
        return datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _content_type(message: WahaMessage) -> MessageContentType:
    if message.location_text is not None:
        return MessageContentType.LOCATION
    if not message.has_media:
        return MessageContentType.TEXT
    mimetype = str((message.media or {}).get("mimetype") or "")
    for prefix, kind in (
        ("image/", MessageContentType.IMAGE),
        ("audio/", MessageContentType.AUDIO),
        ("video/", MessageContentType.VIDEO),
        ("application/", MessageContentType.DOCUMENT),
    ):
        if mimetype.startswith(prefix):
            return kind
    return MessageContentType.OTHER


def _phone_number(chat_id: str) -> str | None:
    match = _PHONE_CHAT.match(chat_id)
    return f"+{match.group(1)}" if match else None


def ingest_message(
    session: Session, *, route: ChannelSessionRoute, event: WahaEvent, serde: Serde, request_id: str | None
) -> WebhookResult:
    """Store the message once; dispatch it when a customer wrote it in a one-to-one chat an agent may answer."""
    plan = _plan_message(0, route, event, serde, request_id)
    if isinstance(plan, WebhookResult):
        return plan
    outbox = OutboxBatch()
    result = plan.apply(session, outbox)
    outbox.flush(session)
    return result


def _plan_message(
    index: int, route: ChannelSessionRoute, event: WahaEvent, serde: Serde, request_id: str | None
) -> _Planned | WebhookResult:
    try:
        message = WahaMessage.model_validate(event.payload)
    except ValidationError as exc:
        raise _invalid("message", exc) from exc
    chat_id = message.to if message.from_me else message.from_
    if not chat_id:
        raise ValidationFailed(
            "An own message (fromMe) needs `to`", details={"errors": [{"loc": ["payload", "to"], "msg": "required"}]}
        )
    if chat_id.endswith(_BROADCAST_SUFFIXES):
        return WebhookResult(message_id=None, dispatched=False, duplicate=False, reason="broadcast")
    return _Planned(
        index,
        chat_id,
        lambda session, outbox: _store_message(
            session,
            outbox,
            route=route,
            event=event,
            message=message,
            chat_id=chat_id,
            serde=serde,
            request_id=request_id,
        ),
    )


def _store_message(
    session: Session,
    outbox: OutboxBatch,
    *,
    route: ChannelSessionRoute,
    event: WahaEvent,
    message: WahaMessage,
    chat_id: str,
    serde: Serde,
    request_id: str | None,
) -> WebhookResult:
    """The message's writes: an echo matched, a command handled at ingest, or the message stored (and dispatched).

    The echo comes first: a ``fromMe`` delivery of the platform's own reply is not the owner
    typing, and a reply that happens to read ``/compact`` or ``/handback`` — a customer can ask
    the agent to write exactly that — must not run an owner's command (2026-12-05: it did)."""
    from_me = message.from_me
    org_id, channel_session_id = route.org_id, route.channel_session_id
    is_group = chat_id.endswith("@g.us")
    if from_me and not is_group:
        echoed = repository.claim_own_echo(
            session,
            org_id=org_id,
            channel_session_id=channel_session_id,
            chat_id=chat_id,
            external_id=message.id,
            body=message.body or "",
        )
        if echoed is None and slash.looks_like_command(message.body):
            # The send's answer may have given our row this id already (then it is no longer unidentified).
            echoed = repository.message_id_by_external(session, org_id, channel_session_id, message.id)
        if echoed is not None:
            # Our own reply coming back from the channel: it is already stored (now with its id).
            return WebhookResult(message_id=echoed, dispatched=False, duplicate=True, reason="echo")
    if not is_group:
        # The owner's /todo and /compact are handled here, before dispatch: never stored nor sent to the agent.
        handled = slash.handle_ingest_command(
            session,
            route=route,
            chat_id=chat_id,
            text=message.body,
            serde=serde,
            external_id=message.id,
            from_me=from_me,
            outbox=outbox,
            request_id=request_id,
        )
        if handled is not None:
            return handled
    occurred_at = _occurred_at(message.timestamp)
    message_id = uuid.uuid4()
    attributes: dict[str, Any] = {"event": event.event}
    if event.id:
        attributes["delivery_id"] = event.id
    if message.participant:
        attributes["participant"] = message.participant
    if message.has_media:
        attributes["has_media"] = True
    content_type = _content_type(message)
    # A location's text is where it is (WEBJS puts a thumbnail in ``body``); an attachment's is its caption.
    body = message.location_text if content_type is MessageContentType.LOCATION else message.body
    ingested = repository.ingest(
        session,
        org_id=org_id,
        channel_session_id=channel_session_id,
        message_id=message_id,
        chat_id=chat_id,
        is_group=is_group,
        phone_number=None if is_group else _phone_number(chat_id),
        # Only the customer's own name: an own message carries the business's.
        contact_name=None if from_me or is_group else message.sender_name,
        # A customer writing again reopens a closed conversation; a handoff stays with the humans.
        reopen=not from_me and not is_group,
        direction=(MessageDirection.OUTBOUND if from_me else MessageDirection.INBOUND).value,
        sender=(MessageSender.HUMAN if from_me else MessageSender.CONTACT).value,
        external_id=message.id,
        body=body or "",
        content_type=content_type.value,
        from_me=from_me,
        delivery_status=(MessageDeliveryStatus.SENT if from_me else MessageDeliveryStatus.RECEIVED).value,
        occurred_at=occurred_at,
        attributes=attributes,
    )
    if not ingested.stored:
        existing = repository.message_id_by_external(session, org_id, channel_session_id, message.id)
        return WebhookResult(message_id=existing, dispatched=False, duplicate=True, reason="duplicate")
    if not from_me and not is_group:
        slash.add_customer_todo(session, org_id, ingested.conversation_id, message.body)

    reason = None
    if from_me and not (not is_group and is_run_command(message.body)):
        reason = "from_me"
        if (
            not is_group
            and ingested.conversation_status == ConversationStatus.OPEN.value
            and not names_a_command(message.body)
            and phone.take_over_from_phone(
                session,
                outbox,
                route=route,
                conversation_id=ingested.conversation_id,
                body=message.body or "",
                serde=serde,
                request_id=request_id,
            )
        ):
            reason = phone.TAKEN_OVER
    elif is_group:
        reason = "group"
    elif ingested.conversation_status != ConversationStatus.OPEN.value or ingested.contact_id is None:
        reason = "human_handoff"
    if reason is not None:
        return WebhookResult(message_id=message_id, dispatched=False, duplicate=False, reason=reason)

    assert ingested.contact_id is not None  # narrowed above
    record = DispatchRequested(
        event_id=uuid.uuid5(DISPATCH_EVENT_NAMESPACE, str(message_id)),
        org_id=org_id,
        request_id=request_id or None,
        conversation_id=ingested.conversation_id,
        contact_id=ingested.contact_id,
        channel_session_id=channel_session_id,
        wake_reason=WakeReason.USER_MESSAGE,
        wake_context=WakeContext(message_id=message_id),
        message=InboundMessage(
            message_id=message_id,
            external_id=message.id,
            chat_id=chat_id,
            text=body or "",
            received_at=occurred_at,
            from_me=from_me,
            is_group=False,
            content_type=content_type,
        ),
        dry_run=False,
    )
    outbox.add(Topics.DISPATCH_REQUESTED, record, serde=serde)
    return WebhookResult(message_id=message_id, dispatched=True, duplicate=False)
