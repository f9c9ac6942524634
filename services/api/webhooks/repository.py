"""All SQL of webhook ingest (sync Session, inside the tenant transaction of the delivery).

Ingest must be correct when the same delivery arrives many times at once, so
every write is an ``INSERT ... ON CONFLICT`` on the natural key rather than a
read-then-write: contacts on (org_id, external_id), conversations on
(channel_session_id, chat_id), messages on (channel_session_id, external_id).
It is also the hot path of the API, so the three writes are one statement (one
round trip, compiled once): see ``_INGEST``. Row-level security applies as to
any statement (the tenant is set); the ``org_id`` filters are the code's own.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, DateTime, Text, bindparam, select, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import UUID as PG_UUID
from sqlalchemy.orm import Session

from switchboard.db.lookups import ChannelSessionRoute
from switchboard.db.models.channels import Message
from switchboard.db.tenancy import TENANT_SETTING
from switchboard.run_outcomes import NOT_ATTEMPTED, WITH_HUMANS

# ``lookup_channel_session`` (SECURITY DEFINER, works before the org is known) for every
# session named in a batch of deliveries on the name-routed URL, in one round trip. The secrets are tenant rows:
# they are read after the tenant is set (``session_secrets``).
_ROUTES = text(
    """
SELECT n.name AS external_session, r.channel_session_id, r.org_id, r.status
FROM unnest(CAST(:external_sessions AS text[])) AS n(name)
CROSS JOIN LATERAL lookup_channel_session(:provider, n.name) AS r
"""
)


def routes(session: Session, provider: str, external_sessions: Iterable[str]) -> dict[str, ChannelSessionRoute]:
    """Which org and channel session each named session belongs to (unknown names are absent)."""
    names = sorted(set(external_sessions))
    if not names:
        return {}
    rows = session.execute(_ROUTES, {"provider": provider, "external_sessions": names})
    return {row.external_session: ChannelSessionRoute(row.channel_session_id, row.org_id, row.status) for row in rows}


_ROUTES_BY_ID = text(
    """
SELECT r.channel_session_id, r.org_id, r.status, r.external_session
FROM unnest(CAST(:ids AS uuid[])) AS n(id)
CROSS JOIN LATERAL lookup_channel_session_by_id(:provider, n.id) AS r
"""
)


def routes_by_id(
    session: Session, provider: str, channel_session_ids: Iterable[uuid.UUID | None]
) -> dict[uuid.UUID, tuple[ChannelSessionRoute, str]]:
    """The sessions the per-session webhook URLs of a batch name, each with its WAHA name."""
    ids = sorted({i for i in channel_session_ids if i is not None}, key=str)
    if not ids:
        return {}
    rows = session.execute(_ROUTES_BY_ID, {"provider": provider, "ids": ids})
    found: dict[uuid.UUID, tuple[ChannelSessionRoute, str]] = {}
    for row in rows:
        found[row.channel_session_id] = (
            ChannelSessionRoute(row.channel_session_id, row.org_id, row.status),
            row.external_session,
        )
    return found


def set_tenant(session: Session, org_id: uuid.UUID) -> None:
    """Scope the rest of the transaction to ``org_id`` (a batch switches between its orgs)."""
    session.execute(_SET_TENANT, {"org_id": str(org_id)})


_SET_TENANT = text(f"SELECT set_config('{TENANT_SETTING}', :org_id, true)")


@dataclass(frozen=True, slots=True)
class SessionSecret:
    """The sealed webhook secret of one session (what verification needs, nothing else)."""

    ciphertext: bytes | None
    iv: bytes | None
    tag: bytes | None
    key_id: str | None


_SESSION_SECRETS = text(
    "SELECT id, webhook_secret_ciphertext, webhook_secret_iv, webhook_secret_tag, webhook_secret_key_id"
    " FROM channel_sessions WHERE org_id = :org_id AND id = ANY(:channel_session_ids)"
).bindparams(
    bindparam("org_id", type_=PG_UUID(as_uuid=True)),
    bindparam("channel_session_ids", type_=ARRAY(PG_UUID(as_uuid=True))),
)


def session_secrets(
    session: Session, org_id: uuid.UUID, channel_session_ids: Iterable[uuid.UUID]
) -> dict[uuid.UUID, SessionSecret]:
    """The sealed secrets of the tenant's sessions, by id (the tenant must be set). SQL compiled
    once: every batch runs it, and built per call it cost more than it ran."""
    rows = session.execute(_SESSION_SECRETS, {"org_id": org_id, "channel_session_ids": list(channel_session_ids)})
    return {row.id: SessionSecret(*row[1:]) for row in rows}


@dataclass(frozen=True, slots=True)
class Ingested:
    """What the ingest statement did: the conversation (locked) and whether the message is new."""

    conversation_id: uuid.UUID
    conversation_status: str
    contact_id: uuid.UUID | None
    stored: bool


# One statement, one round trip: find or create the contact, create or touch (and lock)
# the conversation, insert the message unless (channel_session_id, external_id) exists.
# - Contact: the common case is a returning customer (found by SELECT). A first contact is
#   inserted; if a concurrent delivery inserted it first, ON CONFLICT DO UPDATE (a no-op)
#   still returns its id. Group chats have no contact (:contact_chat is NULL).
# - Conversation: ON CONFLICT DO UPDATE takes the row lock a SELECT ... FOR UPDATE would,
#   and holds it until commit (a new row is locked by its own insert). The message insert
#   reads from this CTE, so it runs after the lock is held: deliveries of one conversation
#   serialize here, and their outbox rows follow commit order per conversation (Kafka key).
#   A customer writing again reopens a closed conversation (:reopen); a handoff stays.
# - Message: ON CONFLICT DO NOTHING; ``stored`` is false for a repeated delivery.
_INGEST = text(
    """
WITH contact_found AS (
    SELECT c.id, c.display_name FROM contacts AS c WHERE c.org_id = :org_id AND c.external_id = :contact_chat
), contact_new AS (
    INSERT INTO contacts (org_id, external_id, phone_number, display_name)
    SELECT :org_id, :contact_chat, :phone_number, :contact_name
    WHERE :contact_chat IS NOT NULL AND NOT EXISTS (SELECT 1 FROM contact_found)
    ON CONFLICT (org_id, external_id) DO UPDATE SET updated_at = contacts.updated_at
    RETURNING id
), contact_named AS (
    -- The customer's WhatsApp name fills a contact that has none; a name already there stays.
    UPDATE contacts SET display_name = :contact_name, updated_at = now()
    WHERE :contact_name IS NOT NULL
      AND id = (SELECT id FROM contact_found WHERE display_name IS NULL)
    RETURNING id
), contact AS (
    SELECT id FROM contact_found UNION ALL SELECT id FROM contact_new
), conversation AS (
    INSERT INTO conversations AS cv (org_id, channel_session_id, chat_id, contact_id, is_group, status, last_message_at)
    VALUES (:org_id, :channel_session_id, :chat_id, (SELECT id FROM contact LIMIT 1), :is_group, 'open', :occurred_at)
    ON CONFLICT (channel_session_id, chat_id) DO UPDATE SET
        last_message_at = greatest(cv.last_message_at, excluded.last_message_at),
        contact_id = coalesce(cv.contact_id, excluded.contact_id),
        status = CASE WHEN :reopen AND cv.status = 'closed' THEN 'open' ELSE cv.status END,
        updated_at = now()
    RETURNING cv.id, cv.status, cv.contact_id
), message AS (
    INSERT INTO messages (id, org_id, conversation_id, channel_session_id, direction, sender, external_id,
                          body, content_type, from_me, delivery_status, occurred_at, attributes)
    SELECT :message_id, :org_id, conversation.id, :channel_session_id, :direction, :sender, :external_id,
           :body, :content_type, :from_me, :delivery_status, :occurred_at, CAST(:attributes AS jsonb)
    FROM conversation
    ON CONFLICT (channel_session_id, external_id) DO NOTHING
    RETURNING id
)
SELECT conversation.id, conversation.status, conversation.contact_id,
       EXISTS (SELECT 1 FROM message) AS stored
FROM conversation
"""
).bindparams(
    bindparam("org_id", type_=PG_UUID(as_uuid=True)),
    bindparam("channel_session_id", type_=PG_UUID(as_uuid=True)),
    bindparam("message_id", type_=PG_UUID(as_uuid=True)),
    bindparam("contact_chat", type_=Text()),
    bindparam("phone_number", type_=Text()),
    bindparam("contact_name", type_=Text()),
    bindparam("is_group", type_=Boolean()),
    bindparam("reopen", type_=Boolean()),
    bindparam("from_me", type_=Boolean()),
    bindparam("occurred_at", type_=DateTime(timezone=True)),
)


def ingest(
    session: Session,
    *,
    org_id: uuid.UUID,
    channel_session_id: uuid.UUID,
    message_id: uuid.UUID,
    chat_id: str,
    is_group: bool,
    phone_number: str | None,
    reopen: bool,
    contact_name: str | None = None,
    direction: str,
    sender: str,
    external_id: str,
    body: str,
    content_type: str,
    from_me: bool,
    delivery_status: str,
    occurred_at: datetime,
    attributes: dict[str, Any],
) -> Ingested:
    """Contact, conversation (locked until commit) and message in one round trip; see ``_INGEST``."""
    row = session.execute(
        _INGEST,
        {
            "org_id": org_id,
            "channel_session_id": channel_session_id,
            "message_id": message_id,
            "chat_id": chat_id,
            "contact_chat": None if is_group else chat_id,
            "phone_number": phone_number,
            "contact_name": contact_name,
            "is_group": is_group,
            "reopen": reopen,
            "direction": direction,
            "sender": sender,
            "external_id": external_id,
            "body": body,
            "content_type": content_type,
            "from_me": from_me,
            "delivery_status": delivery_status,
            "occurred_at": occurred_at,
            "attributes": json.dumps(attributes),
        },
    ).one()
    return Ingested(
        conversation_id=row.id, conversation_status=row.status, contact_id=row.contact_id, stored=bool(row.stored)
    )


# WAHA echoes every message the business's number sends, ours included, as a ``message.any``
# with ``fromMe``. The notifier stores a reply (external id unknown) before it calls the
# channel, and learns the id only from the channel's answer: an echo that arrives first would
# be stored again as a person's message. So an own message is first matched to the newest
# unidentified outbound message of the conversation with the same text, written by the
# platform in the last minutes (an agent's reply or intent, or a person's message sent from
# Switchboard: only rows the platform wrote lack a channel id; ingested ones all have it);
# a match takes the channel's id instead of a new row. A reply the notifier withheld because
# people own the conversation was never sent: a person pasting its text is their own message.
# The row
# lock waits for a notifier recording the same row: after its commit the row has an id, no
# longer matches, and the insert that follows sees the id taken (a duplicate).
ECHO_WINDOW_MINUTES = 10
# Outbound messages that certainly never went out: withheld after a takeover, or failed before
# any attempt (the notifier's ``interrupted_before_send``: people may send them again). A person
# typing one of them on the phone wrote their own message, not an echo of ours.
_NEVER_SENT_SQL = ", ".join(f"'{code}'" for code in (WITH_HUMANS, NOT_ATTEMPTED))
_BLANK = " \t\r\n"  # what the channel may add or drop around a text
_CLAIM_ECHO = text(
    f"""
UPDATE messages AS m SET external_id = :external_id, updated_at = now()
WHERE m.id = (
    SELECT o.id FROM messages AS o
    JOIN conversations AS cv ON cv.id = o.conversation_id
    WHERE cv.org_id = :org_id AND cv.channel_session_id = :channel_session_id AND cv.chat_id = :chat_id
      AND o.org_id = :org_id AND o.direction = 'outbound' AND o.external_id IS NULL
      AND coalesce(o.delivery_error, '') NOT IN ({_NEVER_SENT_SQL})
      AND o.occurred_at > now() - interval '{ECHO_WINDOW_MINUTES} minutes' AND btrim(o.body, :blank) = :body
    ORDER BY o.occurred_at DESC
    LIMIT 1
    FOR UPDATE OF o
)
AND m.external_id IS NULL
AND NOT EXISTS (
    SELECT 1 FROM messages AS taken WHERE taken.channel_session_id = :channel_session_id
      AND taken.external_id = :external_id)
RETURNING m.id
"""
).bindparams(
    bindparam("org_id", type_=PG_UUID(as_uuid=True)), bindparam("channel_session_id", type_=PG_UUID(as_uuid=True))
)


def claim_own_echo(
    session: Session, *, org_id: uuid.UUID, channel_session_id: uuid.UUID, chat_id: str, external_id: str, body: str
) -> uuid.UUID | None:
    """The platform's own outbound message this ``fromMe`` delivery echoes, now holding its id; else None."""
    stripped = body.strip(_BLANK)
    if not stripped:
        return None
    return session.scalars(
        _CLAIM_ECHO,
        {
            "org_id": org_id,
            "channel_session_id": channel_session_id,
            "chat_id": chat_id,
            "external_id": external_id,
            "body": stripped,
            "blank": _BLANK,
        },
    ).one_or_none()


# A text this platform sent (or is sending) in the conversation lately, whatever became of its
# channel id: by when its send was claimed or finished, not when the row was written (a send
# tool's message waits for its run's end; a notifier that was down sends late). A reply withheld
# after a takeover was never sent, so a person typing it is a person.
_SENT_RECENTLY = text(
    f"""
SELECT 1 FROM run_deliveries AS d
JOIN messages AS m ON m.id = d.message_id
WHERE d.org_id = :org_id AND m.org_id = :org_id AND m.conversation_id = :conversation_id
  AND m.direction = 'outbound'
  AND coalesce(d.error_code, '') NOT IN ({_NEVER_SENT_SQL}) AND d.status <> 'claimed'
  AND greatest(d.created_at, coalesce(d.completed_at, d.created_at)) > now() - interval '{ECHO_WINDOW_MINUTES} minutes'
  AND btrim(m.body, :blank) = :body
LIMIT 1
"""
).bindparams(
    bindparam("org_id", type_=PG_UUID(as_uuid=True)), bindparam("conversation_id", type_=PG_UUID(as_uuid=True))
)


def sent_recently(session: Session, *, org_id: uuid.UUID, conversation_id: uuid.UUID, body: str) -> bool:
    """Whether ``body`` is a text this platform sent in the conversation lately: an own message
    with that text is most likely a copy of our send (a retried send the channel had already
    delivered, a late echo), never a person taking the conversation over."""
    stripped = body.strip(_BLANK)
    if not stripped:
        return False
    found = session.execute(
        _SENT_RECENTLY, {"org_id": org_id, "conversation_id": conversation_id, "body": stripped, "blank": _BLANK}
    ).first()
    return found is not None


def message_id_by_external(
    session: Session, org_id: uuid.UUID, channel_session_id: uuid.UUID, external_id: str
) -> uuid.UUID | None:
    return session.scalars(
        select(Message.id).where(
            Message.org_id == org_id,
            Message.channel_session_id == channel_session_id,
            Message.external_id == external_id,
        )
    ).one_or_none()


# Receipts arrive out of order and more than once: a status only moves forward
# (pending < sent < delivered < read); an error only marks a message not yet delivered.
_DELIVERY_PROGRESS = "ARRAY['pending', 'sent', 'delivered', 'read']"
_ADVANCE_DELIVERY = text(
    f"""
UPDATE messages AS m SET delivery_status = :status, updated_at = now()
WHERE m.org_id = :org_id AND m.channel_session_id = :channel_session_id AND m.external_id = :external_id
  AND m.direction = 'outbound'
  AND CASE WHEN :status = 'failed' THEN m.delivery_status IN ('pending', 'sent')
           ELSE coalesce(array_position({_DELIVERY_PROGRESS}, m.delivery_status), 0)
                < array_position({_DELIVERY_PROGRESS}, CAST(:status AS text)) END
RETURNING m.id
"""
).bindparams(
    bindparam("org_id", type_=PG_UUID(as_uuid=True)), bindparam("channel_session_id", type_=PG_UUID(as_uuid=True))
)


def advance_delivery_status(
    session: Session, *, org_id: uuid.UUID, channel_session_id: uuid.UUID, external_id: str, status: str
) -> uuid.UUID | None:
    """The own message whose delivery status this receipt moved forward; None when it moved none."""
    return session.scalars(
        _ADVANCE_DELIVERY,
        {"org_id": org_id, "channel_session_id": channel_session_id, "external_id": external_id, "status": status},
    ).one_or_none()


@dataclass(frozen=True, slots=True)
class StatusChange:
    """A session's status before a ``session.status`` report, and what names it to the owner."""

    previous: str
    label: str
    phone_number: str | None


# The old status comes from the row locked by the same statement: concurrent reports serialize,
# and exactly one of them sees the transition. A report older than the one the status came from
# (WAHA's clock on both sides) changes nothing (revision 0041).
_SET_SESSION_STATUS = text(
    """
UPDATE channel_sessions AS cs
SET status = :status, status_reported_at = coalesce(:reported_at, old.status_reported_at), updated_at = now()
FROM (SELECT id, status, status_reported_at FROM channel_sessions
      WHERE org_id = :org_id AND id = :channel_session_id FOR UPDATE) AS old
WHERE cs.id = old.id
  AND (CAST(:reported_at AS timestamptz) IS NULL OR old.status_reported_at IS NULL
       OR :reported_at >= old.status_reported_at)
RETURNING old.status AS previous, cs.label, cs.phone_number
"""
).bindparams(
    bindparam("org_id", type_=PG_UUID(as_uuid=True)),
    bindparam("channel_session_id", type_=PG_UUID(as_uuid=True)),
    bindparam("reported_at", type_=DateTime(timezone=True)),
)


def set_session_status(
    session: Session, org_id: uuid.UUID, channel_session_id: uuid.UUID, status: str, reported_at: datetime | None
) -> StatusChange | None:
    """The status a report gives; None when it changed nothing (a report older than the status's)."""
    row = session.execute(
        _SET_SESSION_STATUS,
        {"org_id": org_id, "channel_session_id": channel_session_id, "status": status, "reported_at": reported_at},
    ).one_or_none()
    return None if row is None else StatusChange(row.previous, row.label, row.phone_number)
