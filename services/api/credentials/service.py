"""Credential rules: store a key sealed, list and show the safe view, update, revalidate, delete.

Functions take a sync ``Session`` whose transaction the caller owns and never
commit. The plaintext key exists only inside :func:`create_credential` (sealed
before anything touches the database) and in the background check; it is
never logged, audited or put in an error.

Delete is a tombstone: the row stays (versions and runs that name it keep their
history, the FK is ``ON DELETE RESTRICT``) but its sealed key is erased, it stops
being active or default, and its label becomes free again. It is refused with
409 while a *published* version names the credential.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.api.core.errors import Conflict, NotFound, ValidationFailed
from services.api.credentials import repository
from services.api.credentials.schemas import CredentialProvider, CredentialView, key_prefix_problem
from services.api.credentials.validation import ValidationOutcome
from switchboard.credentials import last4, seal_api_key
from switchboard.crypto import KeyRing
from switchboard.db.audit import record_audit
from switchboard.db.enums import ActorKind, CredentialValidation
from switchboard.db.models.agents import AiProviderCredential
from switchboard.observability.logging import get_logger

log = get_logger(__name__)

_LABEL_INDEX = "uq_ai_provider_credentials_live_label"
_DEFAULT_INDEX = "uq_ai_provider_credentials_one_default_per_provider"


def _now() -> datetime:
    return datetime.now(UTC)


def view(row: AiProviderCredential) -> CredentialView:
    """The safe view; the only shape in which a credential leaves this domain."""
    return CredentialView(
        id=row.id,
        provider=CredentialProvider(row.provider),
        label=row.label,
        last4=row.last4,
        base_url=row.base_url,
        is_default=row.is_default,
        validation_status=CredentialValidation(row.validation_status),
        validated_at=row.validated_at,
        validation_error=row.validation_error,
        models_available=row.models_available,
        created_by=row.created_by,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _label_conflict() -> Conflict:
    return Conflict("A credential with this label already exists for this provider", details={"reason": "label_taken"})


def _flush_or_conflict(session: Session) -> None:
    """Flush; a concurrent writer that took the label or the default first is a 409. The unique
    indexes decide; the statement is never echoed (it holds the ciphertext)."""
    try:
        session.flush()
    except IntegrityError as exc:
        constraint = getattr(getattr(exc.orig, "diag", None), "constraint_name", None)
        if constraint == _LABEL_INDEX:
            raise _label_conflict() from None
        if constraint == _DEFAULT_INDEX:
            raise Conflict(
                "Another default for this provider was set at the same moment; retry",
                details={"reason": "default_taken"},
            ) from None
        raise


def create_credential(
    session: Session,
    keyring: KeyRing,
    *,
    org_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    provider: CredentialProvider,
    label: str,
    api_key: str,
    base_url: str | None,
    is_default: bool,
    request_id: str | None,
) -> AiProviderCredential:
    """Seal the key (associated data = this row and org) and store it, pending validation.

    Making it the default moves the provider's default here in the same transaction.
    """
    if repository.label_taken(session, org_id, provider.value, label):
        raise _label_conflict()
    credential_id = uuid.uuid4()
    sealed = seal_api_key(keyring, org_id=org_id, credential_id=credential_id, api_key=api_key)
    if is_default:
        repository.clear_default(session, org_id, provider.value)
    row = AiProviderCredential(
        id=credential_id,
        org_id=org_id,
        provider=provider.value,
        label=label,
        ciphertext=sealed.ciphertext,
        iv=sealed.iv,
        tag=sealed.tag,
        key_id=sealed.key_id,
        last4=last4(api_key),
        base_url=base_url,
        is_default=is_default,
        validation_status=CredentialValidation.PENDING.value,
        created_by=actor_user_id,
    )
    session.add(row)
    _flush_or_conflict(session)
    record_audit(
        session,
        org_id=org_id,
        action="ai_credential.created",
        actor_user_id=actor_user_id,
        target_type="ai_provider_credential",
        target_id=row.id,
        details={
            "provider": provider.value,
            "label": label,
            "last4": row.last4,
            "base_url": base_url,
            "is_default": is_default,
            "encryption_key_id": sealed.key_id,
        },
        request_id=request_id,
    )
    log.info(
        "credential stored",
        extra={"credential_id": str(row.id), "organization_id": str(org_id), "provider": provider.value},
    )
    return row


class KeyNotForProvider(ValidationFailed):
    code = "credential_key_mismatch"
    default_message = "The new key does not look like a key of this credential's provider"


def update_credential(
    session: Session,
    keyring: KeyRing,
    *,
    org_id: uuid.UUID,
    credential_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    label: str | None,
    api_key: str | None,
    is_default: bool | None,
    request_id: str | None,
) -> tuple[AiProviderCredential, bool]:
    """Rename, move the default, or replace the key in place; the row and whether its key changed.

    A new key is sealed for the same row (so every version naming the credential uses it from its
    next run: a leaked key is rotated in one call), shown by its new ``last4`` and ``pending``
    until the background check (the caller schedules it). Never audited with the key itself.
    """
    row = repository.live(session, org_id, credential_id, lock=True)
    if row is None:
        raise NotFound("No such credential")
    audited: dict[str, object] = {}
    if label is not None and label != row.label:
        if repository.label_taken(session, org_id, row.provider, label):
            raise _label_conflict()
        audited["label"] = {"from": row.label, "to": label}
        row.label = label
    if is_default is not None and is_default != row.is_default:
        if is_default:
            repository.clear_default(session, org_id, row.provider)
        row.is_default = is_default
        audited["is_default"] = is_default
    if api_key is not None:
        problem = key_prefix_problem(row.provider, row.base_url, api_key)
        if problem is not None:
            raise KeyNotForProvider(problem)
        sealed = seal_api_key(keyring, org_id=org_id, credential_id=row.id, api_key=api_key)
        audited["key_replaced"] = {
            "last4_from": row.last4,
            "last4_to": last4(api_key),
            "encryption_key_id": sealed.key_id,
        }
        row.ciphertext, row.iv, row.tag, row.key_id = sealed.ciphertext, sealed.iv, sealed.tag, sealed.key_id
        row.last4 = last4(api_key)
        row.validation_status = CredentialValidation.PENDING.value
        row.validation_error = None
        row.validated_at = None
        row.models_available = None
    if not audited:
        return row, False
    _flush_or_conflict(session)
    record_audit(
        session,
        org_id=org_id,
        action="ai_credential.updated",
        actor_user_id=actor_user_id,
        target_type="ai_provider_credential",
        target_id=row.id,
        details={"provider": row.provider, **audited},
        request_id=request_id,
    )
    session.flush()
    session.refresh(row)
    return row, api_key is not None


def list_credentials(
    session: Session, *, org_id: uuid.UUID, provider: CredentialProvider | None
) -> list[CredentialView]:
    return [view(row) for row in repository.list_live(session, org_id, None if provider is None else provider.value)]


def get_credential(session: Session, *, org_id: uuid.UUID, credential_id: uuid.UUID) -> AiProviderCredential:
    row = repository.live(session, org_id, credential_id)
    if row is None:
        raise NotFound("No such credential")
    return row


def request_revalidation(
    session: Session,
    *,
    org_id: uuid.UUID,
    credential_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    request_id: str | None,
) -> AiProviderCredential:
    """Mark the credential pending; the caller schedules the check after commit."""
    row = repository.live(session, org_id, credential_id, lock=True)
    if row is None:
        raise NotFound("No such credential")
    row.validation_status = CredentialValidation.PENDING.value
    record_audit(
        session,
        org_id=org_id,
        action="ai_credential.revalidation_requested",
        actor_user_id=actor_user_id,
        target_type="ai_provider_credential",
        target_id=row.id,
        request_id=request_id,
    )
    session.flush()
    return row


def delete_credential(
    session: Session,
    *,
    org_id: uuid.UUID,
    credential_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    request_id: str | None,
) -> None:
    """Tombstone the credential and erase its key; 409 while a published version uses it.

    The row lock serializes this with a publish that share-locks the credential
    (``switchboard.credentials.lock_live_credential``).
    """
    row = repository.live(session, org_id, credential_id, lock=True)
    if row is None:
        raise NotFound("No such credential")
    in_use = repository.published_versions_using(session, org_id, credential_id)
    if in_use:
        raise Conflict(
            "A published agent version uses this credential; publish a version with another credential first",
            details={
                "reason": "credential_in_use",
                "agent_ids": sorted({str(v.agent_id) for v in in_use}),
                "version_ids": [str(v.id) for v in in_use],
            },
        )
    row.deleted_at = _now()
    row.is_active = False
    row.is_default = False
    row.ciphertext = row.iv = row.tag = None
    row.key_id = None
    row.models_available = None
    record_audit(
        session,
        org_id=org_id,
        action="ai_credential.deleted",
        actor_user_id=actor_user_id,
        target_type="ai_provider_credential",
        target_id=row.id,
        details={"provider": row.provider, "label": row.label, "last4": row.last4},
        request_id=request_id,
    )
    session.flush()


def record_validation(
    session: Session,
    *,
    org_id: uuid.UUID,
    credential_id: uuid.UUID,
    outcome: ValidationOutcome,
    probed_iv: bytes | None = None,
) -> None:
    """Store a background check's outcome (skipped if the credential was deleted meanwhile, or its
    key replaced since the check read it: ``probed_iv``, the checked sealing's IV — the check of
    the new key records its own outcome).

    ``validated_at`` is when the provider last accepted the key: a rejection clears
    it, a transient failure (provider down, timeout) keeps it.
    """
    row = repository.live(session, org_id, credential_id, lock=True)
    if row is None:
        return
    if probed_iv is not None and (row.iv is None or bytes(row.iv) != probed_iv):
        log.info("credential check of a replaced key not recorded", extra={"credential_id": str(credential_id)})
        return
    row.validation_status = outcome.status.value
    if outcome.status is CredentialValidation.VALID:
        row.validated_at = _now()
        row.validation_error = None
        row.models_available = outcome.models
    else:
        row.validation_error = outcome.error
        if outcome.status is CredentialValidation.INVALID:
            row.validated_at = None
            row.models_available = None
    record_audit(
        session,
        org_id=org_id,
        action="ai_credential.validated",
        actor_kind=ActorKind.SYSTEM,
        actor_ref="credential validation",
        target_type="ai_provider_credential",
        target_id=row.id,
        details={"validation_status": outcome.status.value, "http_status": outcome.http_status},
    )
