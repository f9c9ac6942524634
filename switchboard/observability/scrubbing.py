"""Remove secrets from anything that may be logged, traced or published.

Secrets must never reach a log line, an event, a trace or an error report
(SPEC §10). Scrubbing is by key name — ``authorization``, ``x-api-key``,
``api_key``, ``password``, anything ending in ``_key``/``_secret``/``_token`` —
and by value shape for strings that look like credentials embedded in text
(bearer tokens, provider keys, passwords in URLs).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

REDACTED = "[REDACTED]"

# The one definition of a secret-looking key, shared by logs, traces and the audit log.
_SECRET_KEY_NAMES = frozenset(
    {
        "authorization",
        "x-api-key",
        "api_key",
        "apikey",
        "password",
        "passwd",
        "secret",
        "token",
        "cookie",
        "set-cookie",
        "ciphertext",
        "private_key",
        "privatekey",
    }
)
_SECRET_KEY_SUFFIXES = ("_key", "-key", "_secret", "-secret", "_token", "-token", "_password", "_ciphertext")

_SECRET_VALUE_PATTERNS: tuple[re.Pattern[str], ...] = (
    # credentials inside URLs: scheme://user:password@host
    re.compile(r"(?P<keep>[a-z][a-z0-9+.-]*://[^:/@\s]+:)[^@\s]+(?=@)", re.IGNORECASE),
    # Authorization header values
    re.compile(r"(?P<keep>\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE),
    # provider-style keys: sk-..., sk-ant-..., AIza...
    re.compile(r"(?P<keep>)\b(?:sk-[A-Za-z0-9_-]{16,}|AIza[0-9A-Za-z_-]{20,})"),
)


# A setting or header written out, ``name: value`` / ``name=value`` ('X-Api-Key': '…', api_key=…,
# Authorization: Token …, KAFKA_SASL_PASSWORD=…): masked when the name is a secret's
# (:func:`is_secret_key`) — the keys with no recognisable shape (WAHA keys, webhook secrets).
_ASSIGNMENT = re.compile(
    r"(?<![A-Za-z0-9_-])(?P<name>[A-Za-z][A-Za-z0-9_-]*)"
    r"(?P<sep>['\"]?\s*[:=]\s*['\"]?(?:(?:bearer|basic|token)\s+)?)"
    r"(?P<value>[^\s'\",;&}]+)",
    re.IGNORECASE,
)


def is_secret_key(name: str) -> bool:
    """True when a mapping key names a secret (case-insensitive)."""
    lowered = name.lower()
    return lowered in _SECRET_KEY_NAMES or lowered.endswith(_SECRET_KEY_SUFFIXES)


def scrub_text(text: str, *, written_out: bool = True) -> str:
    """Mask credential-shaped substrings of free text.

    ``written_out=False`` skips the ``name: value`` rule, for messages we wrote ourselves that
    name a field and then say what is wrong with it (``body.api_key: String should have…``):
    the API's error envelope, which never echoes an input."""
    for pattern in _SECRET_VALUE_PATTERNS:
        text = pattern.sub(lambda m: f"{m.group('keep')}{REDACTED}", text)
    if not written_out or ("=" not in text and ":" not in text):
        return text  # most log field values (ids, names, numbers): nothing written out to mask
    return _ASSIGNMENT.sub(_mask_named_value, text)


def _mask_named_value(match: re.Match[str]) -> str:
    if not is_secret_key(match.group("name")):
        return match.group(0)
    return f"{match.group('name')}{match.group('sep')}{REDACTED}"


def scrub(value: Any, *, written_out: bool = True) -> Any:
    """Return a copy of ``value`` with secrets masked, recursing into mappings and sequences
    (``written_out``: as for :func:`scrub_text`)."""
    if isinstance(value, Mapping):
        return {
            key: (REDACTED if isinstance(key, str) and is_secret_key(key) else scrub(item, written_out=written_out))
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return type(value)(scrub(item, written_out=written_out) for item in value)
    if isinstance(value, str):
        return scrub_text(value, written_out=written_out)
    return value
