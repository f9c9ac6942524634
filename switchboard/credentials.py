"""Bring-your-own provider keys: how they are sealed, and opened just in time.

Every service that calls a provider (the API validating a key, the runner
calling a model) goes through this module, so the rules live in one place:

- a key is sealed with the key ring under associated data that names the table,
  the org and the row (:func:`credential_aad`): a ciphertext copied to another
  row or org does not open;
- it is opened only at the moment of use (:func:`open_credential`), returned to
  the caller and never logged, put in an exception message, an event or a trace;
- a deleted credential holds no secret any more, so it cannot be opened.

``ProviderSettings`` holds the providers' default endpoints, shared by the API
(validation) and the runner (model calls); tests point them at a local fake.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from pydantic import Field
from pydantic_settings import SettingsConfigDict
from sqlalchemy import select
from sqlalchemy.orm import Session

from switchboard.crypto import CryptoError, KeyRing, Sealed
from switchboard.db.enums import LlmProvider
from switchboard.db.models.agents import AiProviderCredential
from switchboard.settings import SharedSettings, stack_env_files

LAST4_CHARS = 4


class ProviderSettings(SharedSettings):
    """Provider endpoints in each official SDK's convention (env prefix ``PROVIDERS_``).

    OpenAI's base URL ends in ``/v1`` (as in its SDK); Anthropic's and Google's do not.
    A credential's own ``base_url`` (an OpenAI-compatible local server) wins over these.
    """

    model_config = SettingsConfigDict(env_prefix="PROVIDERS_", env_file=stack_env_files(), extra="ignore", frozen=True)

    anthropic_base_url: str = "https://api.anthropic.com"
    openai_base_url: str = "https://api.openai.com/v1"
    google_base_url: str = "https://generativelanguage.googleapis.com"
    # The whole validation request (connect + answer), in seconds.
    validation_timeout_s: float = Field(default=10.0, gt=0, le=120)

    def base_url(self, provider: LlmProvider | str) -> str:
        urls = {
            LlmProvider.ANTHROPIC: self.anthropic_base_url,
            LlmProvider.OPENAI: self.openai_base_url,
            LlmProvider.GOOGLE: self.google_base_url,
        }
        return urls[LlmProvider(provider)].rstrip("/")


class CredentialUnavailable(Exception):
    """The credential cannot be used; ``code`` is stable and the message never holds key material.

    Codes: ``not_found`` (no such credential in this org), ``deleted``, ``undecryptable``
    (unknown key id or tampered ciphertext: an operator problem, see docs/security.md).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class OpenedCredential:
    """A credential with its key in clear: hold it only for the call that needs it."""

    credential_id: uuid.UUID
    provider: str
    base_url: str | None
    api_key: str = field(repr=False)
    # Which sealing of the key was opened (a fresh IV per seal): an outcome about this key must not
    # be recorded on a key a PATCH put in its place since.
    sealed_iv: bytes | None = None


def credential_aad(org_id: uuid.UUID, credential_id: uuid.UUID) -> bytes:
    """``ai_provider_credentials:<org_id>:<credential_id>``: binds a ciphertext to its row and org."""
    return f"ai_provider_credentials:{org_id}:{credential_id}".encode()


def last4(api_key: str) -> str:
    """What the UI shows ("•••• abcd"): the last four characters, never more."""
    return api_key[-LAST4_CHARS:]


def seal_api_key(keyring: KeyRing, *, org_id: uuid.UUID, credential_id: uuid.UUID, api_key: str) -> Sealed:
    """Encrypt under the primary key with a fresh IV; the row must get ``credential_id`` as its id."""
    return keyring.seal(api_key.encode(), aad=credential_aad(org_id, credential_id))


def sealed_of(row: AiProviderCredential) -> Sealed | None:
    """The stored ciphertext of a row, or None for a deleted credential."""
    if row.ciphertext is None or row.iv is None or row.tag is None or row.key_id is None:
        return None
    return Sealed(bytes(row.ciphertext), bytes(row.iv), bytes(row.tag), row.key_id)


def open_row(keyring: KeyRing, row: AiProviderCredential) -> str:
    """Decrypt a loaded row (raises :class:`CredentialUnavailable`, never with key material)."""
    sealed = sealed_of(row)
    if row.deleted_at is not None or sealed is None:
        raise CredentialUnavailable("deleted", f"credential {row.id} was deleted")
    try:
        return keyring.open(sealed, aad=credential_aad(row.org_id, row.id)).decode()
    except CryptoError as exc:
        # Only the stable code and the key id travel on: neither is secret.
        raise CredentialUnavailable(
            "undecryptable", f"credential {row.id} cannot be decrypted ({exc.code}, key id {sealed.key_id!r})"
        ) from None
    except UnicodeDecodeError:
        raise CredentialUnavailable("undecryptable", f"credential {row.id} does not decode as text") from None


def _row(session: Session, org_id: uuid.UUID, credential_id: uuid.UUID) -> AiProviderCredential:
    row = session.scalars(
        select(AiProviderCredential).where(
            AiProviderCredential.org_id == org_id, AiProviderCredential.id == credential_id
        )
    ).one_or_none()
    if row is None:
        raise CredentialUnavailable("not_found", f"no credential {credential_id} in this organization")
    return row


def load_credential(
    session: Session, keyring: KeyRing, org_id: uuid.UUID, credential_id: uuid.UUID
) -> OpenedCredential:
    """The credential with its key decrypted, for a provider call made right now.

    ``session`` must be inside the org's tenant transaction (row-level security);
    the query filters by org as well.
    """
    row = _row(session, org_id, credential_id)
    return OpenedCredential(
        credential_id=row.id,
        provider=row.provider,
        base_url=row.base_url,
        api_key=open_row(keyring, row),
        sealed_iv=None if row.iv is None else bytes(row.iv),
    )


def open_credential(session: Session, keyring: KeyRing, org_id: uuid.UUID, credential_id: uuid.UUID) -> str:
    """Just the plaintext key (see :func:`load_credential`). Never log what this returns."""
    return load_credential(session, keyring, org_id, credential_id).api_key


def default_credential_id(session: Session, org_id: uuid.UUID, provider: LlmProvider | str) -> uuid.UUID | None:
    """The org's default live credential for ``provider`` (step 2 of credential resolution), if any."""
    return session.scalars(
        select(AiProviderCredential.id).where(
            AiProviderCredential.org_id == org_id,
            AiProviderCredential.provider == str(provider),
            AiProviderCredential.is_default,
            AiProviderCredential.is_active,
            AiProviderCredential.deleted_at.is_(None),
        )
    ).one_or_none()


def lock_live_credential(session: Session, org_id: uuid.UUID, credential_id: uuid.UUID) -> AiProviderCredential | None:
    """The live credential, share-locked until the end of the transaction; None if missing or deleted.

    Publishing a version that uses a credential must call this: DELETE takes the
    row's exclusive lock, so the two serialize and a published version can never
    end up naming a credential deleted at the same moment.
    """
    return session.scalars(
        select(AiProviderCredential)
        .where(
            AiProviderCredential.org_id == org_id,
            AiProviderCredential.id == credential_id,
            AiProviderCredential.deleted_at.is_(None),
            AiProviderCredential.is_active,
        )
        .with_for_update(read=True)
    ).one_or_none()
