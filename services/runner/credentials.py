"""Which key a run uses, resolved in the fixed order [002 "Identità e credenziali", SPEC §6]:

1. the version's credential (``ai_agent_versions.credential_id``);
2. the org's default credential for the provider;
3. the platform key from the environment (``RUNNER_<PROVIDER>_API_KEY``).

A credential that is deleted or deactivated is skipped (the next step
applies); one that exists but cannot be decrypted fails the run — that is an
operator problem (a key ring without the key id), and silently charging the
platform instead would hide it. Keys are decrypted here, at the start of the
run that needs them (``switchboard.credentials.open_credential``), held only by
the run's :class:`ProviderAccess`, and never logged, traced or put in an event
or error message. The demo model needs no key.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from pydantic import SecretStr
from sqlalchemy import select
from sqlalchemy.orm import Session

from services.runner.providers.base import CredentialSource, ProviderAccess
from switchboard.credentials import (
    CredentialUnavailable,
    ProviderSettings,
    default_credential_id,
    load_credential,
)
from switchboard.crypto import KeyRing
from switchboard.db.models import AiProviderCredential


class NoCredential(Exception):
    """No key at any step of the resolution; ``code`` is stable, the message names no secret."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class CredentialResolver:
    def __init__(
        self,
        *,
        keyring: KeyRing,
        platform_keys: Mapping[str, SecretStr | None],
        provider_settings: ProviderSettings,
    ) -> None:
        self._keyring = keyring
        self._platform = platform_keys
        self._providers = provider_settings

    def resolve(
        self,
        session: Session,
        *,
        org_id: uuid.UUID,
        provider: str,
        version_credential_id: uuid.UUID | None,
        requires_key: bool,
    ) -> ProviderAccess:
        """Run inside the org's tenant transaction (the credential rows are under RLS)."""
        if not requires_key:
            return ProviderAccess(source=CredentialSource.NONE, base_url=None)
        if version_credential_id is not None and self._usable(session, org_id, version_credential_id):
            return self._open(session, org_id, version_credential_id, CredentialSource.VERSION)
        default_id = default_credential_id(session, org_id, provider)
        if default_id is not None:
            return self._open(session, org_id, default_id, CredentialSource.ORG_DEFAULT)
        platform = self._platform.get(provider)
        if platform is not None and platform.get_secret_value().strip():
            return ProviderAccess(
                source=CredentialSource.PLATFORM,
                base_url=self._providers.base_url(provider),
                api_key=platform.get_secret_value().strip(),  # a Secret written with a trailing newline
            )
        raise NoCredential("no_credential", f"no {provider} key: none on the version, the org or the platform")

    @staticmethod
    def _usable(session: Session, org_id: uuid.UUID, credential_id: uuid.UUID) -> bool:
        row = session.execute(
            select(AiProviderCredential.is_active, AiProviderCredential.deleted_at).where(
                AiProviderCredential.org_id == org_id, AiProviderCredential.id == credential_id
            )
        ).one_or_none()
        return row is not None and bool(row.is_active) and row.deleted_at is None

    def _open(
        self, session: Session, org_id: uuid.UUID, credential_id: uuid.UUID, source: CredentialSource
    ) -> ProviderAccess:
        try:
            opened = load_credential(session, self._keyring, org_id, credential_id)
        except CredentialUnavailable as exc:
            raise NoCredential(f"credential_{exc.code}", str(exc)) from None
        return ProviderAccess(
            source=source,
            base_url=opened.base_url or self._providers.base_url(opened.provider),
            credential_id=opened.credential_id,
            api_key=opened.api_key,
            credential_iv=opened.sealed_iv,
        )
