"""Request and response bodies of the credentials endpoints [004 §4.2].

The key travels one way: ``api_key`` is accepted by create and never returned.
Every response uses :class:`CredentialView`, the safe view (``last4`` only).
"""

from __future__ import annotations

import ipaddress
import uuid
from datetime import datetime
from enum import StrEnum
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from switchboard.db.enums import CredentialValidation
from switchboard.egress import refuse_literal_address

# What a pasted key must look like for the provider's own endpoint; a custom base_url
# (a local OpenAI-compatible server) accepts any key, since such servers choose their own.
KEY_PREFIXES: dict[str, str] = {"anthropic": "sk-ant-", "openai": "sk-", "google": "AIza"}
_LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".lan", ".home.arpa")


class CredentialProvider(StrEnum):
    """Providers that take a bring-your-own key (the demo model needs none)."""

    ANTHROPIC = "anthropic"
    OPENAI = "openai"
    GOOGLE = "google"


def _is_local_host(host: str) -> bool:
    """Hosts where plain http is acceptable: loopback, private networks, single-label names."""
    if host == "localhost" or host.endswith(_LOCAL_SUFFIXES) or ("." not in host and ":" not in host):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private


def check_base_url(value: str | None) -> str | None:
    """An http(s) API root with no credentials, query or fragment; https unless the host is local.

    Link-local hosts (cloud metadata endpoints such as 169.254.169.254) are refused outright.
    The messages never echo the value.
    """
    if value is None:
        return None
    parts = urlsplit(value.strip())
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or not host:
        raise ValueError("must be an http(s) URL with a host")
    if parts.username or parts.password:
        raise ValueError("must not embed credentials; send the key in api_key")
    if parts.query or parts.fragment:
        raise ValueError("must not have a query string or fragment")
    refuse_literal_address(host)
    if parts.scheme == "http" and not _is_local_host(host):
        raise ValueError("plain http is accepted only for local hosts; use https")
    return parts.geturl().rstrip("/")


def check_label(value: str) -> str:
    value = value.strip()
    if not value or not value.isprintable():
        raise ValueError("must be printable text")
    return value


def check_key_shape(value: SecretStr) -> SecretStr:
    key = value.get_secret_value().strip()
    # Printable ASCII without spaces: anything else is a paste accident, and it could not
    # travel in an HTTP header anyway. The message never repeats the key.
    if not key or not all(33 <= ord(ch) <= 126 for ch in key):
        raise ValueError("must be printable ASCII without spaces")
    return SecretStr(key)


def key_prefix_problem(provider: str, base_url: str | None, key: str) -> str | None:
    """Why ``key`` cannot be the provider's (its own endpoint wants its own prefix); None if it can."""
    prefix = KEY_PREFIXES[provider]
    if base_url is None and not key.startswith(prefix):
        return f"a {provider} key starts with {prefix!r}; check the provider"
    return None


class CreateCredential(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provider: CredentialProvider
    label: str = Field(min_length=1, max_length=200, description="A name people recognise, e.g. 'Production'")
    api_key: SecretStr = Field(
        min_length=8, max_length=512, description="The provider key; encrypted on receipt, never returned"
    )
    base_url: str | None = Field(
        default=None,
        max_length=2048,
        description=(
            "An OpenAI-compatible local server or proxy instead of the provider, in the official SDK's convention "
            "(OpenAI: ending in /v1, e.g. http://localhost:11434/v1); null = the provider's own endpoint"
        ),
    )
    is_default: bool = Field(
        default=False, description="Use this key for the provider's versions that name no credential"
    )

    _check_url = field_validator("base_url")(check_base_url)

    _check_label = field_validator("label")(check_label)
    _check_key = field_validator("api_key")(check_key_shape)

    @model_validator(mode="after")
    def _prefix_matches_provider(self) -> CreateCredential:
        problem = key_prefix_problem(self.provider.value, self.base_url, self.api_key.get_secret_value())
        if problem is not None:
            raise ValueError(problem)
        return self


class UpdateCredential(BaseModel):
    """Only the properties sent change. A new ``api_key`` replaces the key in place: every agent
    version that names this credential uses it from its next run (one-step rotation)."""

    model_config = ConfigDict(extra="forbid")

    label: str | None = Field(default=None, min_length=1, max_length=200)
    api_key: SecretStr | None = Field(
        default=None, min_length=8, max_length=512, description="A new key for the same provider; never returned"
    )
    is_default: bool | None = Field(default=None, description="Make this the provider's default key, or stop")

    @field_validator("label", "api_key", "is_default", mode="before")
    @classmethod
    def _not_null(cls, value: object) -> object:
        if value is None:
            raise ValueError("cannot be null; leave the property out to keep it")
        return value

    _check_label = field_validator("label")(check_label)
    _check_key = field_validator("api_key")(check_key_shape)


class CredentialView(BaseModel):
    """The safe view: everything about a credential except its key."""

    id: uuid.UUID
    provider: CredentialProvider
    label: str
    last4: str = Field(description="The key's last four characters, for recognising it ('•••• abcd')")
    base_url: str | None
    is_default: bool
    validation_status: CredentialValidation = Field(
        description="`pending` until the background check ran; then `valid`, `invalid` (rejected) or `error`"
    )
    validated_at: datetime | None = Field(description="When the provider last accepted the key")
    validation_error: str | None = Field(description="Why the last check failed: HTTP status and error type only")
    models_available: list[str] | None = Field(description="Models the provider listed for this key")
    created_by: uuid.UUID | None
    created_at: datetime
    updated_at: datetime
