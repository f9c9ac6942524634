"""Checking a BYO key against its provider's models endpoint.

The key goes only into a request header (``x-api-key``, ``Authorization:
Bearer``, ``x-goog-api-key`` - never the URL, so it cannot land in an access
log), redirects are not followed, and what is stored and shown afterwards is
only the HTTP status and the provider's error *type* (never its message, which
can echo part of the key).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import httpx

from switchboard.credentials import OpenedCredential, ProviderSettings
from switchboard.db.enums import CredentialValidation, LlmProvider
from switchboard.egress import EgressPolicy, EgressRefused, GuardedTransport
from switchboard.observability.scrubbing import REDACTED, scrub_text

ANTHROPIC_VERSION = "2023-06-01"
MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_MODELS = 1000
_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
# Error identifiers that mean "this key is wrong" whatever the status (Google answers 400 API_KEY_INVALID).
_KEY_REJECTED = frozenset({"API_KEY_INVALID", "invalid_api_key", "authentication_error", "permission_error"})
_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/@-]{0,199}")


@dataclass(frozen=True)
class ValidationOutcome:
    status: CredentialValidation
    models: list[str] | None = None
    # Safe to store and show: provider, HTTP status, error type. Never the key, never a provider message.
    error: str | None = None
    http_status: int | None = None


def build_request(
    provider: LlmProvider | str, base_url: str, api_key: str
) -> tuple[str, dict[str, str], dict[str, str]]:
    """(url, headers, query) of the models request; the key is always in a header."""
    provider = LlmProvider(provider)
    base = base_url.rstrip("/")
    if provider is LlmProvider.ANTHROPIC:
        return f"{base}/v1/models", {"x-api-key": api_key, "anthropic-version": ANTHROPIC_VERSION}, {"limit": "1000"}
    if provider is LlmProvider.OPENAI:
        # OpenAI's base URL already ends in /v1, as in its SDK (and in OpenAI-compatible servers).
        return f"{base}/models", {"Authorization": f"Bearer {api_key}"}, {}
    if provider is LlmProvider.GOOGLE:
        return f"{base}/v1beta/models", {"x-goog-api-key": api_key}, {"pageSize": "1000"}
    raise ValueError(f"{provider.value} takes no key")


def _tokens(body: Any) -> list[str]:
    """The machine-readable error identifiers a provider put in its error body (type, code, status, reason)."""
    if not isinstance(body, dict):
        return []
    error = body.get("error")
    found: list[Any] = []
    if isinstance(error, dict):
        found += [error.get("type"), error.get("code"), error.get("status")]
        details = error.get("details")
        if isinstance(details, list):
            found += [d.get("reason") for d in details if isinstance(d, dict)]
    return [t for t in found if isinstance(t, str) and _TOKEN.fullmatch(t)]


def _model_ids(provider: LlmProvider, body: Any) -> list[str]:
    if not isinstance(body, dict):
        return []
    if provider is LlmProvider.GOOGLE:
        entries = body.get("models")
        key = "name"
    else:
        entries = body.get("data")
        key = "id"
    if not isinstance(entries, list):
        return []
    ids = []
    for entry in entries[:MAX_MODELS]:
        value = entry.get(key) if isinstance(entry, dict) else None
        if isinstance(value, str):
            value = value.removeprefix("models/")
            if _MODEL_ID.fullmatch(value):
                ids.append(value)
    return sorted(set(ids))


def _safe(text: str, api_key: str) -> str:
    """Belt and braces: whatever we composed, the key (or a credential-shaped string) is masked."""
    return scrub_text(text.replace(api_key, REDACTED))[:500]


def _outcome_for_status(provider: LlmProvider, status: int, body: Any, api_key: str) -> ValidationOutcome:
    if 200 <= status < 300:
        return ValidationOutcome(CredentialValidation.VALID, models=_model_ids(provider, body), http_status=status)
    types = [t for t in dict.fromkeys(_tokens(body)) if api_key not in t]
    detail = f"HTTP {status}" + (f", {', '.join(types)}" if types else "")
    if status in (401, 403) or _KEY_REJECTED.intersection(types):
        return ValidationOutcome(
            CredentialValidation.INVALID,
            error=_safe(f"{provider.value} rejected the key ({detail})", api_key),
            http_status=status,
        )
    hint = " (redirects are not followed; check base_url)" if 300 <= status < 400 else ""
    hint = " (check base_url)" if status == 404 else hint
    return ValidationOutcome(
        CredentialValidation.ERROR,
        error=_safe(f"{provider.value} answered {detail}{hint}", api_key),
        http_status=status,
    )


async def _read_capped(response: httpx.Response) -> Any:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except ValueError:
        return None


async def probe(
    credential: OpenedCredential, providers: ProviderSettings, egress: EgressPolicy | None = None
) -> ValidationOutcome:
    """Ask the provider (or the credential's base_url) to list models with this key.

    A tenant's base_url is called through the egress guard: its host is resolved when the
    request is made, and an address the policy refuses (cloud metadata, link-local; private
    ones when the operator denies them) is never called — a name saved as harmless may
    resolve to one later (docs/security.md)."""
    provider = LlmProvider(credential.provider)
    url, headers, params = build_request(
        provider, credential.base_url or providers.base_url(provider), credential.api_key
    )
    timeout = httpx.Timeout(providers.validation_timeout_s)
    transport = GuardedTransport(egress or EgressPolicy()) if credential.base_url else None
    try:
        async with (
            httpx.AsyncClient(timeout=timeout, follow_redirects=False, transport=transport) as client,
            client.stream("GET", url, headers=headers, params=params) as response,
        ):
            body = await _read_capped(response)
            return _outcome_for_status(provider, response.status_code, body, credential.api_key)
    except EgressRefused as exc:
        reason = f"base_url refused by the egress policy ({exc.reason})"
    except httpx.TimeoutException:
        reason = f"no answer within {providers.validation_timeout_s:g} s"
    except httpx.HTTPError as exc:
        # The class name only: some transport errors quote request headers in their message.
        reason = f"could not reach the provider ({type(exc).__name__})"
    return ValidationOutcome(CredentialValidation.ERROR, error=f"{provider.value}: {reason}")
