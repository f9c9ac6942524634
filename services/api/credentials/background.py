"""The background check of a credential, run after the request that stored it committed.

It uses its own short transactions: one to read and decrypt the key, none
while waiting on the provider (which may take seconds), one to record the
outcome. It never raises (a background task has nobody to report to but the
log) and never logs the key or an exception message (which could quote it).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from sqlalchemy import select

from services.api.core.database import Database
from services.api.credentials import service
from services.api.credentials.validation import ValidationOutcome, probe
from switchboard.credentials import CredentialUnavailable, OpenedCredential, ProviderSettings, load_credential
from switchboard.crypto import KeyRing
from switchboard.db.enums import CredentialValidation
from switchboard.db.models.agents import AiProviderCredential
from switchboard.db.session import async_tenant_transaction
from switchboard.egress import EgressPolicy
from switchboard.observability.logging import get_logger

log = get_logger(__name__)


@dataclass(frozen=True)
class ValidationDeps:
    """What the check needs from the app; it outlives the request that scheduled it."""

    database: Database
    keyring: KeyRing
    providers: ProviderSettings
    egress: EgressPolicy = field(default_factory=EgressPolicy)


async def validate_in_background(deps: ValidationDeps, org_id: uuid.UUID, credential_id: uuid.UUID) -> None:
    """Validate one credential against its provider and record the outcome."""
    fields = {"credential_id": str(credential_id), "organization_id": str(org_id)}
    try:
        credential: OpenedCredential | None = None
        async with deps.database.sessions() as session, async_tenant_transaction(session, org_id):
            # Which sealing of the key is checked (a fresh IV per seal): a PATCH may replace the key
            # while the provider answers, and this outcome must not then be recorded for the new key.
            probed_iv = await session.scalar(
                select(AiProviderCredential.iv).where(
                    AiProviderCredential.org_id == org_id, AiProviderCredential.id == credential_id
                )
            )
            try:
                credential = await session.run_sync(lambda s: load_credential(s, deps.keyring, org_id, credential_id))
            except CredentialUnavailable as exc:
                if exc.code != "undecryptable":
                    log.info("credential validation skipped", extra={**fields, "reason": exc.code})
                    return
        if credential is None:
            outcome = ValidationOutcome(CredentialValidation.ERROR, error="the stored key cannot be decrypted")
        else:
            outcome = await probe(credential, deps.providers, deps.egress)
            credential = None
        async with deps.database.sessions() as session, async_tenant_transaction(session, org_id):
            await session.run_sync(
                lambda s: service.record_validation(
                    s,
                    org_id=org_id,
                    credential_id=credential_id,
                    outcome=outcome,
                    probed_iv=bytes(probed_iv) if probed_iv is not None else None,
                )
            )
        log.info(
            "credential validated",
            extra={**fields, "validation_status": outcome.status.value, "http_status": outcome.http_status},
        )
    except Exception as exc:
        log.error("credential validation failed to run", extra={**fields, "error_class": type(exc).__name__})
