"""Keyword triggers' patterns, compiled with RE2: linear time whatever a tenant writes.

An agent's ``trigger_config.keyword_regex`` is searched in every inbound message its org
receives, by the dispatcher, on the event loop that serves every org of its partitions.
Python's ``re`` backtracks: ``(a+)+$`` against 28 ``a``s and a ``b`` took 16 s on this
machine, a stalled worker for everyone, and the replay after its restart met the same
message again. RE2 (google-re2) guarantees time linear in the text and refuses the
constructs that need backtracking (backreferences, lookarounds) — a ``422`` when the
version is saved, with RE2's own message. Decided (2026-12-05; docs/api.md "Checked at save
time"): the API and the dispatcher share this one compiler, so what saves is what runs.

Syntax notes for owners: case-insensitive always; ``\\w``, ``\\d`` and ``\\b`` are ASCII in
RE2 (``\\pL`` matches any letter, accented ones included: ``atendimento|atenção`` works as
written).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final, Protocol

import re2

# Most memory RE2 may use for one compiled pattern (its default is 8 MiB).
MAX_PROGRAM_BYTES: Final = 1 << 20
CACHE_SIZE: Final = 1_024


class KeywordPattern(Protocol):
    def search(self, text: str) -> object | None: ...


class KeywordPatternError(ValueError):
    """The pattern is not one RE2 compiles (the message says why)."""

    code = "keyword_regex_invalid"


def _options() -> re2.Options:
    options = re2.Options()
    options.case_sensitive = False
    options.never_capture = True  # only "does it match": no groups to keep
    options.log_errors = False  # a tenant's bad pattern is their 422, not our stderr
    options.max_mem = MAX_PROGRAM_BYTES
    return options


_OPTIONS: Final = _options()


def compile_keyword(pattern: str) -> KeywordPattern:
    """The compiled pattern, or :class:`KeywordPatternError` with RE2's reason."""
    try:
        return re2.compile(pattern, _OPTIONS)  # type: ignore[no-any-return]
    except re2.error as exc:
        raise KeywordPatternError(_reason(exc)) from None


@lru_cache(maxsize=CACHE_SIZE)
def cached_keyword(pattern: str) -> KeywordPattern | None:
    """:func:`compile_keyword` cached both ways; None for a pattern that does not compile."""
    try:
        return compile_keyword(pattern)
    except KeywordPatternError:
        return None


def _reason(exc: Exception) -> str:
    detail = exc.args[0] if exc.args else str(exc)
    if isinstance(detail, bytes):
        detail = detail.decode("utf-8", errors="replace")
    return str(detail)
