"""Channel session rules: create, edit, rotate the webhook secret; seal and open its secrets.

The webhook secret is generated here (never chosen by a person, so it is long
and random) and sealed with the key ring; the API must read it back in clear to
verify HMAC signatures, which is why it is encrypted rather than hashed. The
associated data names the column, the org and the row, so a ciphertext copied
to another session or org does not open (``sealed_aad``; ``switchboard admin
rotate-keys`` re-seals both columns under a new primary key).

Functions take a sync ``Session`` whose transaction the caller owns and never commit.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.api.channels import repository
from services.api.core.errors import Conflict, NotFound
from switchboard.crypto import KeyRing, Sealed
from switchboard.db.audit import record_audit
from switchboard.db.enums import ChannelProvider, ChannelSessionStatus
from switchboard.db.lookups import lookup_channel_session, lookup_session_name_on_server
from switchboard.db.models.channels import ChannelSession
from switchboard.rotation import channel_session_aad

SECRET_PREFIX = "sbwh_"
SealedField = Literal["webhook_secret", "api_key"]


@dataclass(frozen=True)
class IssuedSecret:
    row: ChannelSession
    webhook_secret: str


def sealed_aad(field: SealedField, org_id: uuid.UUID, session_id: uuid.UUID) -> bytes:
    """``channel_sessions.<field>:<org_id>:<session_id>``: binds a ciphertext to its row.

    The format is defined once in the shared package, where key rotation (and the
    notifier, which opens ``api_key``) read it too.
    """
    return channel_session_aad(field, org_id, session_id)


def new_webhook_secret() -> str:
    """32 random bytes, url-safe, prefixed so secret scanners recognise a leaked one."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def _seal_into(row: ChannelSession, field: SealedField, keyring: KeyRing, plaintext: str | None) -> None:
    if plaintext is None:
        values: tuple[bytes | None, bytes | None, bytes | None, str | None] = (None, None, None, None)
    else:
        sealed = keyring.seal(plaintext.encode(), aad=sealed_aad(field, row.org_id, row.id))
        values = (sealed.ciphertext, sealed.iv, sealed.tag, sealed.key_id)
    for suffix, value in zip(("ciphertext", "iv", "tag", "key_id"), values, strict=True):
        setattr(row, f"{field}_{suffix}", value)


def open_sealed(
    keyring: KeyRing,
    field: SealedField,
    *,
    org_id: uuid.UUID,
    session_id: uuid.UUID,
    ciphertext: bytes | None,
    iv: bytes | None,
    tag: bytes | None,
    key_id: str | None,
) -> bytes | None:
    """The plaintext of a sealed column group, or None when nothing is stored (``CryptoError`` if tampered)."""
    if ciphertext is None or iv is None or tag is None or key_id is None:
        return None
    sealed = Sealed(bytes(ciphertext), bytes(iv), bytes(tag), key_id)
    return keyring.open(sealed, aad=sealed_aad(field, org_id, session_id))


def open_webhook_secret(keyring: KeyRing, row: ChannelSession) -> bytes | None:
    """The HMAC key of the session, or None when it has none."""
    return open_sealed(
        keyring,
        "webhook_secret",
        org_id=row.org_id,
        session_id=row.id,
        ciphertext=row.webhook_secret_ciphertext,
        iv=row.webhook_secret_iv,
        tag=row.webhook_secret_tag,
        key_id=row.webhook_secret_key_id,
    )


def open_api_key(keyring: KeyRing, row: ChannelSession) -> str | None:
    """The provider API key for outbound sends, or None."""
    opened = open_sealed(
        keyring,
        "api_key",
        org_id=row.org_id,
        session_id=row.id,
        ciphertext=row.api_key_ciphertext,
        iv=row.api_key_iv,
        tag=row.api_key_tag,
        key_id=row.api_key_key_id,
    )
    return None if opened is None else opened.decode()


class ChannelSessionArchived(Conflict):
    code = "channel_session_archived"
    default_message = "The channel session is archived: connect the number as a new session"


def archived_at(session: Session, org_id: uuid.UUID, channel_session_id: uuid.UUID) -> datetime | None:
    """When the session was archived (None: live, or unknown)."""
    return session.scalar(
        select(ChannelSession.archived_at).where(
            ChannelSession.org_id == org_id, ChannelSession.id == channel_session_id
        )
    )


def ensure_number_live(session: Session, org_id: uuid.UUID, channel_session_id: uuid.UUID) -> None:
    """409 ``channel_session_archived`` when a conversation's number was archived: nothing sent or
    woken for it could ever go out (a send by name might even leave through another number)."""
    archived = archived_at(session, org_id, channel_session_id)
    if archived is not None:
        raise ChannelSessionArchived(details={"archived_at": archived.isoformat()})


def live_session(
    session: Session, org_id: uuid.UUID, session_id: uuid.UUID, *, for_update: bool = False
) -> ChannelSession:
    """The session a change acts on: 404 when it does not exist, 409 when it is archived (it is
    kept only for the conversations that name it)."""
    row = repository.by_id(session, org_id, session_id, for_update=for_update)
    if row is None:
        raise NotFound("No such channel session")
    if row.archived_at is not None:
        raise ChannelSessionArchived(details={"archived_at": row.archived_at.isoformat()})
    return row


def _name_taken() -> Conflict:
    """Replies go out by name on the session's WAHA server (``base_url``, '' for the platform's),
    so a second session of that name there would send through the first one's number. Whose
    session holds it is never said."""
    return Conflict(
        "A channel session with this name already exists on this WAHA server",
        details={"field": "external_session"},
    )


def create_session(
    session: Session,
    keyring: KeyRing,
    *,
    org_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    label: str,
    external_session: str,
    phone_number: str | None,
    base_url: str | None,
    api_key: str | None,
    request_id: str | None,
    owner_replies_take_over: bool = True,
) -> IssuedSecret:
    """Register a WAHA session for the org with a fresh webhook secret (returned once)."""
    provider = ChannelProvider.WAHA.value
    # Every session is routed by its own webhook URL; the name-routed URL also routes it while
    # no other session holds the name (WAHA Core calls every session ``default``).
    row = ChannelSession(
        id=uuid.uuid4(),
        org_id=org_id,
        provider=provider,
        external_session=external_session,
        label=label,
        phone_number=phone_number,
        base_url=base_url,
        owner_replies_take_over=owner_replies_take_over,
        routes_by_name=lookup_channel_session(session, provider, external_session) is None,
    )
    secret = new_webhook_secret()
    _seal_into(row, "webhook_secret", keyring, secret)
    row.webhook_secret_rotated_at = datetime.now(UTC)
    _seal_into(row, "api_key", keyring, api_key)
    if lookup_session_name_on_server(session, provider, base_url or "", external_session):
        raise _name_taken()
    try:
        with session.begin_nested():
            session.add(row)
            session.flush()
    except IntegrityError as exc:
        if lookup_session_name_on_server(session, provider, base_url or "", external_session):
            raise _name_taken() from exc  # a concurrent create on the same server won the race
        # A concurrent create took the name elsewhere first: this one is routed by its URL only.
        row.routes_by_name = False
        with session.begin_nested():
            session.add(row)
            session.flush()
    record_audit(
        session,
        org_id=org_id,
        action="channel_session.created",
        actor_user_id=actor_user_id,
        target_type="channel_session",
        target_id=row.id,
        details={
            "external_session": external_session,
            "label": label,
            "phone_number": phone_number,
            "base_url": base_url,
            "api_key_stored": api_key is not None,
            "owner_replies_take_over": owner_replies_take_over,
        },
        request_id=request_id,
    )
    session.refresh(row)
    return IssuedSecret(row=row, webhook_secret=secret)


def rotate_webhook_secret(
    session: Session,
    keyring: KeyRing,
    *,
    org_id: uuid.UUID,
    session_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    request_id: str | None,
) -> IssuedSecret:
    """Replace the webhook secret; deliveries signed with the old one are refused from commit on."""
    row = live_session(session, org_id, session_id, for_update=True)
    secret = new_webhook_secret()
    _seal_into(row, "webhook_secret", keyring, secret)
    row.webhook_secret_rotated_at = datetime.now(UTC)
    record_audit(
        session,
        org_id=org_id,
        action="channel_session.secret_rotated",
        actor_user_id=actor_user_id,
        target_type="channel_session",
        target_id=row.id,
        details={"external_session": row.external_session},
        request_id=request_id,
    )
    session.flush()
    session.refresh(row)
    return IssuedSecret(row=row, webhook_secret=secret)


def update_session(
    session: Session,
    keyring: KeyRing,
    *,
    org_id: uuid.UUID,
    session_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    changes: dict[str, object],
    request_id: str | None,
) -> ChannelSession:
    """Apply the properties sent (``label``, ``phone_number``, ``base_url``, ``api_key``,
    ``owner_replies_take_over``)."""
    row = live_session(session, org_id, session_id, for_update=True)
    audited: dict[str, object] = {}
    if "base_url" in changes and (changes["base_url"] or None) != row.base_url:
        moved_to = str(changes["base_url"] or "")
        if lookup_session_name_on_server(session, row.provider, moved_to, row.external_session):
            raise _name_taken()  # another session has this name on that server
    for name in ("label", "phone_number", "base_url", "owner_replies_take_over"):
        if name in changes:
            setattr(row, name, changes[name])
            audited[name] = changes[name]
    if "api_key" in changes:
        api_key = changes["api_key"]
        _seal_into(row, "api_key", keyring, None if api_key is None else str(api_key))
        audited["api_key_stored"] = api_key is not None
    if audited:
        record_audit(
            session,
            org_id=org_id,
            action="channel_session.updated",
            actor_user_id=actor_user_id,
            target_type="channel_session",
            target_id=row.id,
            details=audited,
            request_id=request_id,
        )
        session.flush()
        session.refresh(row)
    return row


def archive_session(
    session: Session,
    *,
    org_id: uuid.UUID,
    session_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    waha_status: str,
    request_id: str | None,
) -> ChannelSession:
    """Archive a number given up, once WAHA logged it out and stopped it (the caller did): kept for
    its conversations, it routes no webhook from commit on and frees its name on its WAHA server,
    and its conversations' scheduled follow-ups are cancelled (nothing can be sent through it any
    more). Archiving twice changes nothing."""
    row = repository.by_id(session, org_id, session_id, for_update=True)
    if row is None:
        raise NotFound("No such channel session")
    if row.archived_at is not None:
        return row
    row.archived_at = datetime.now(UTC)
    row.routes_by_name = False
    row.status = ChannelSessionStatus.STOPPED.value
    cancelled = repository.cancel_followups_of_session(session, org_id, session_id, reason=ChannelSessionArchived.code)
    record_audit(
        session,
        org_id=org_id,
        action="channel_session.archived",
        actor_user_id=actor_user_id,
        target_type="channel_session",
        target_id=row.id,
        details={
            "external_session": row.external_session,
            "waha_status": waha_status,
            "followups_cancelled": cancelled,
        },
        request_id=request_id,
    )
    session.flush()
    session.refresh(row)
    return row
