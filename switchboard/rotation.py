"""Re-encrypt every secret sealed with the key ring under its current primary key.

The procedure (docs/security.md) rotates without downtime:

1. put a new key in front of ``SWITCHBOARD_ENCRYPTION_KEYS`` and roll it out to
   every service: new writes use it, old rows still open with the key id they
   name, because the old key stays in the ring;
2. run ``switchboard admin rotate-keys``: this module walks every sealed value
   not under the primary key, in small keyset-paginated batches, each batch a
   short transaction that locks only its own rows, and re-seals it (same
   associated data, fresh IV, primary key id) - readers are never blocked for
   long and nothing is offline;
3. when the report says ``remaining`` is 0 everywhere, drop the old key.

Tenant tables are walked one organization at a time with ``app.org_id`` set
(row-level security); ``users`` is global. A value that does not open (unknown
key id, tampered ciphertext) is counted as failed, logged by row id, and left
alone; it never stops the run.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import Engine, func, select, update
from sqlalchemy.orm import InstrumentedAttribute, Session

from switchboard.credentials import credential_aad
from switchboard.crypto import CryptoError, KeyRing, Sealed
from switchboard.db.lookups import list_organization_ids
from switchboard.db.models.agents import AiProviderCredential
from switchboard.db.models.channels import ChannelSession
from switchboard.db.models.notifications import OrgWebhook, org_webhook_aad
from switchboard.db.models.tenancy import User
from switchboard.db.session import create_sessionmaker, set_tenant
from switchboard.observability.logging import get_logger

log = get_logger(__name__)

DEFAULT_BATCH_SIZE = 200
_PARTS = ("ciphertext", "iv", "tag", "key_id")


def totp_aad(user_id: uuid.UUID) -> bytes:
    """The associated data of a user's TOTP secret (the format identity seals with)."""
    return f"users.mfa_totp:{user_id}".encode()


def channel_session_aad(field_name: str, org_id: uuid.UUID, session_id: uuid.UUID) -> bytes:
    """The associated data of a channel session's sealed field (the format channels seals with)."""
    return f"channel_sessions.{field_name}:{org_id}:{session_id}".encode()


@dataclass(frozen=True)
class SealedField:
    """Four columns that hold one sealed value, and how that value's associated data is built."""

    name: str
    model: Any
    prefix: str
    # (org_id or None for global tables, row id) -> associated data
    aad: Callable[[uuid.UUID | None, uuid.UUID], bytes]
    tenant: bool

    def column(self, part: str) -> InstrumentedAttribute[Any]:
        attribute: InstrumentedAttribute[Any] = getattr(self.model, f"{self.prefix}{part}")
        return attribute


def _tenant_aad(build: Callable[[uuid.UUID, uuid.UUID], bytes]) -> Callable[[uuid.UUID | None, uuid.UUID], bytes]:
    def aad(org_id: uuid.UUID | None, row_id: uuid.UUID) -> bytes:
        assert org_id is not None, "tenant rows are always walked with their org"
        return build(org_id, row_id)

    return aad


# Every value sealed with the key ring. A new sealed column must be added here, or
# dropping an old key would make it unreadable (tests/unit/test_crypto.py checks the list).
SEALED_FIELDS: tuple[SealedField, ...] = (
    SealedField("ai_provider_credentials", AiProviderCredential, "", _tenant_aad(credential_aad), tenant=True),
    SealedField(
        "channel_sessions.webhook_secret",
        ChannelSession,
        "webhook_secret_",
        _tenant_aad(lambda org, row: channel_session_aad("webhook_secret", org, row)),
        tenant=True,
    ),
    SealedField(
        "channel_sessions.api_key",
        ChannelSession,
        "api_key_",
        _tenant_aad(lambda org, row: channel_session_aad("api_key", org, row)),
        tenant=True,
    ),
    SealedField("users.mfa_totp", User, "mfa_totp_", lambda _org, row: totp_aad(row), tenant=False),
    SealedField("org_webhooks.secret", OrgWebhook, "secret_", _tenant_aad(org_webhook_aad), tenant=True),
)


@dataclass
class FieldReport:
    examined: int = 0
    rotated: int = 0
    failed: int = 0
    # Still not under the primary key after the run (failed rows, or rows written meanwhile
    # by a process that does not know the new primary yet). 0 everywhere = old keys can go.
    remaining: int = 0


@dataclass
class RotationReport:
    primary_key_id: str
    dry_run: bool
    fields: dict[str, FieldReport] = field(default_factory=dict)

    @property
    def failed(self) -> int:
        return sum(f.failed for f in self.fields.values())

    @property
    def remaining(self) -> int:
        return sum(f.remaining for f in self.fields.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "primary_key_id": self.primary_key_id,
            "dry_run": self.dry_run,
            "fields": {name: asdict(report) for name, report in self.fields.items()},
            "failed": self.failed,
            "remaining": self.remaining,
        }


def rotate_encryption_keys(
    engine: Engine,
    keyring: KeyRing,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    org_ids: Iterable[uuid.UUID] | None = None,
    user_ids: Iterable[uuid.UUID] | None = None,
    dry_run: bool = False,
    fields: Iterable[SealedField] = SEALED_FIELDS,
) -> RotationReport:
    """Re-seal every value not under ``keyring.primary_id``; None for a scope means all of it.

    ``dry_run`` opens every value (proving the ring can read it) and writes nothing.
    ``engine`` connects as the application role: row-level security applies.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    sessions = create_sessionmaker(engine)
    if org_ids is None:
        with sessions() as session, session.begin():
            orgs = list_organization_ids(session)
    else:
        orgs = list(org_ids)
    users = None if user_ids is None else list(user_ids)
    report = RotationReport(primary_key_id=keyring.primary_id, dry_run=dry_run)
    for sealed_field in fields:
        counts = report.fields.setdefault(sealed_field.name, FieldReport())
        scopes: list[uuid.UUID | None] = list(orgs) if sealed_field.tenant else [None]
        for org_id in scopes:
            _rotate_scope(sessions(), keyring, sealed_field, org_id, users, batch_size, dry_run, counts)
            counts.remaining += _remaining(sessions(), keyring, sealed_field, org_id, users)
        log.info(
            "key rotation pass done",
            extra={"sealed_field": sealed_field.name, "primary_key_id": keyring.primary_id, **asdict(counts)},
        )
    return report


def _pending(
    sealed_field: SealedField, keyring: KeyRing, org_id: uuid.UUID | None, user_ids: list[uuid.UUID] | None
) -> list[Any]:
    """WHERE clauses: sealed, not under the primary key, in scope."""
    model = sealed_field.model
    clauses: list[Any] = [
        sealed_field.column("ciphertext").is_not(None),
        sealed_field.column("key_id") != keyring.primary_id,
    ]
    if org_id is not None:
        clauses.append(model.org_id == org_id)
    if not sealed_field.tenant and user_ids is not None:
        clauses.append(model.id.in_(user_ids))
    return clauses


def _rotate_scope(
    session: Session,
    keyring: KeyRing,
    sealed_field: SealedField,
    org_id: uuid.UUID | None,
    user_ids: list[uuid.UUID] | None,
    batch_size: int,
    dry_run: bool,
    counts: FieldReport,
) -> None:
    model = sealed_field.model
    columns = [sealed_field.column(part) for part in _PARTS]
    after: uuid.UUID | None = None
    with session:
        while True:
            with session.begin():
                if org_id is not None:
                    set_tenant(session, org_id)
                query = select(model.id, *columns).where(*_pending(sealed_field, keyring, org_id, user_ids))
                if after is not None:
                    query = query.where(model.id > after)
                rows = session.execute(
                    query.order_by(model.id).limit(batch_size).with_for_update(of=model.__table__)
                ).all()
                if not rows:
                    return
                for row_id, ciphertext, iv, tag, key_id in rows:
                    counts.examined += 1
                    sealed = Sealed(bytes(ciphertext), bytes(iv), bytes(tag), str(key_id))
                    aad = sealed_field.aad(org_id, row_id)
                    try:
                        if dry_run:
                            keyring.open(sealed, aad=aad)
                            counts.rotated += 1
                            continue
                        fresh = keyring.rotate(sealed, aad=aad)
                    except CryptoError as exc:
                        counts.failed += 1
                        log.warning(
                            "sealed value cannot be opened; left as is",
                            extra={
                                "sealed_field": sealed_field.name,
                                "row_id": str(row_id),
                                "organization_id": None if org_id is None else str(org_id),
                                "stored_key_id": key_id,
                                "error_code": exc.code,
                            },
                        )
                        continue
                    session.execute(
                        update(model)
                        .where(model.id == row_id, sealed_field.column("key_id") == key_id)
                        .values(
                            {
                                f"{sealed_field.prefix}ciphertext": fresh.ciphertext,
                                f"{sealed_field.prefix}iv": fresh.iv,
                                f"{sealed_field.prefix}tag": fresh.tag,
                                f"{sealed_field.prefix}key_id": fresh.key_id,
                            }
                        )
                        .execution_options(synchronize_session=False)
                    )
                    counts.rotated += 1
                after = rows[-1][0]


def _remaining(
    session: Session,
    keyring: KeyRing,
    sealed_field: SealedField,
    org_id: uuid.UUID | None,
    user_ids: list[uuid.UUID] | None,
) -> int:
    with session, session.begin():
        if org_id is not None:
            set_tenant(session, org_id)
        query = (
            select(func.count())
            .select_from(sealed_field.model)
            .where(*_pending(sealed_field, keyring, org_id, user_ids))
        )
        return int(session.execute(query).scalar_one())
