"""Bounded, compact memories of ids: what a conversation's state keeps for idempotency.

The dispatcher rewrites a conversation's state on every event of it, so its size is paid
on every event: parsed, serialized, written to the changelog. Kept as JSON lists, the 512
dedupe keys and 64 closed run ids of a long-lived conversation were 23 KB and about 80 µs
an event (10 µs for a fresh one). Packed as fixed-width hex entries in one text field they
are about 10 KB, searched with ``str.find`` and never turned into Python objects one by
one. Hex rather than base64: decoding 4 KB of base64 costs more (≈14 µs here) than the whole
lookup, and hex needs no decoding at all.

Dedupe keys are kept as the first 8 bytes of their BLAKE2b digest: among the 512 keys of
one conversation, the chance that a new key collides with a remembered one is about
512 / 2^64 — and a collision would only mean one dispatch taken for a replay. Run ids are
kept whole (their 32 hex digits). Oldest first; appending past the bound drops the oldest.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable

KEY_DIGEST_BYTES = 8


def key_entry(key: str) -> str:
    """A dedupe key's entry: 16 hex digits of its digest."""
    return hashlib.blake2b(key.encode(), digest_size=KEY_DIGEST_BYTES).hexdigest()


def uuid_entry(value: str | uuid.UUID) -> str:
    """A run id's entry: its 32 hex digits."""
    return uuid.UUID(str(value)).hex


def contains(packed: str, entry: str) -> bool:
    """Whether ``entry`` is one of the fixed-width entries (a match must start on one)."""
    width = len(entry)
    start = packed.find(entry)
    while start != -1:
        if start % width == 0:
            return True
        start = packed.find(entry, start + 1)
    return False


def append(packed: str, entry: str, limit: int) -> str:
    """``entry`` added last; only the newest ``limit`` entries are kept."""
    return (packed + entry)[-limit * len(entry) :]


def pack(entries: Iterable[str], limit: int) -> str:
    return "".join(list(entries)[-limit:])
