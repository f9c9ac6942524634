"""Keyword triggers' patterns: Python's syntax and Unicode, with a bound on the time a search may take.

An agent's ``trigger_config.keyword_regex`` is searched in every inbound message its org
receives, by the dispatcher, on the event loop that serves every org of its partitions.
Python's ``re`` backtracks without bound: ``^(a|aa)+$`` against a few dozen ``a``s and a ``!``
stalls a worker for everyone, and the replay after its restart meets the same message again.

Decided (2026-12-05; docs/api.md "Checked at save time"): the ``regex`` module in its
``re``-compatible mode (``V0``): the same syntax and the same Unicode meaning of ``\\b``,
``\\w`` and ``\\d`` as before — a Portuguese ``\\bolá\\b`` keeps matching ("oi, OLÁ!") — plus
a timeout on every search. RE2 (linear time) was tried the same day and dropped: its
``\\b``, ``\\w`` and ``\\d`` are ASCII, so saved patterns around accented words stopped
matching without a word. Three guards:

- before compiling (:func:`compile_keyword`, so at save time and in the dispatcher alike): no
  repeat count, nor the product of the counts of nested repeats, exceeds :data:`MAX_REPEAT`
  (``422 keyword_regex_repeat_too_large`` otherwise) — compiling ``a{5000000}`` allocates memory
  in proportion to the count (gigabytes), and ``(a{1000}){1000}`` multiplies;
- at save time (:func:`check_keyword`): the pattern compiles, and searching a few texts that
  make catastrophic patterns backtrack finishes within :data:`SEARCH_TIMEOUT_S` each
  (``422 keyword_regex_too_slow`` otherwise);
- at match time (:class:`KeywordPattern`): a search that exceeds the timeout raises
  :class:`KeywordPatternTimeout`, and the compiled pattern is disabled in this process, so a
  pattern the probes missed costs each worker one timeout, not one per message.

The API and the dispatcher share this one compiler, so what saves is what runs.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Final

import regex
from regex import _regex_core

# The longest a search may take before the pattern is given up on.
SEARCH_TIMEOUT_S: Final = 0.02
CACHE_SIZE: Final = 1_024
_FLAGS: Final = regex.IGNORECASE | regex.V0
# The largest repeat count (``{n}``, ``{n,}``, ``{,m}``, ``{n,m}``), and the largest product of the
# counts of repeats nested in one another; a keyword pattern needs a few dozen at most.
MAX_REPEAT: Final = 1_000
# Texts that make the usual catastrophic shapes backtrack ((a+)+$, (a|aa)+$, (\w+\s?)+$ ...).
PROBES: Final = (
    "a" * 3_000 + "!",
    "1" * 3_000 + "!",
    " " * 3_000 + "!",
    "ab" * 1_500 + "!",
    "olá " * 750 + "!",
)


class KeywordPatternError(ValueError):
    """The pattern does not compile, or searching it is too slow (the message says which)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class KeywordPatternTimeout(Exception):
    """A search exceeded :data:`SEARCH_TIMEOUT_S`; the pattern is disabled in this process."""


class KeywordPattern:
    """A compiled keyword pattern that gives up on a search taking longer than the timeout."""

    __slots__ = ("_compiled", "disabled")

    def __init__(self, compiled: regex.Pattern[str]) -> None:
        self._compiled = compiled
        self.disabled = False

    def matches(self, text: str) -> bool:
        if self.disabled:
            raise KeywordPatternTimeout("disabled after an earlier search timed out")
        try:
            return self._compiled.search(text, timeout=SEARCH_TIMEOUT_S) is not None
        except TimeoutError:
            self.disabled = True
            raise KeywordPatternTimeout(f"a search took longer than {SEARCH_TIMEOUT_S * 1000:.0f} ms") from None


def _parse(pattern: str) -> Any:
    """The pattern as ``regex.compile`` parses it, before it compiles (which is what allocates per
    repeat). ``regex``'s own parser, as ``regex._main._compile`` calls it: a text scan for ``{n}``
    would miss counts the parser reads, such as ``(?x)a{1 000 000}`` (verbose mode skips spaces)."""
    flags = _FLAGS
    while True:
        source = _regex_core.Source(pattern)
        info = _regex_core.Info(flags, source.char_type, {})
        info.guess_encoding = regex.UNICODE
        source.ignore_space = bool(info.flags & regex.VERBOSE)
        source.use_unicode_space(bool(info.flags & regex.V1))
        try:
            return _regex_core._parse_pattern(source, info)
        except _regex_core._UnscopedFlagSet:  # an inline flag such as (?x) mid-pattern: parse again with it
            flags = info.global_flags


def _largest_repeat(parsed: Any) -> int:
    """The largest product of the repeat counts around any part of the parsed pattern (stops once past
    :data:`MAX_REPEAT`). Lazy and possessive repeats are greedy ones' subclasses; nodes are walked
    through their attributes, whatever their kind (groups, branches, lookarounds, conditionals)."""
    largest = 1
    stack: list[tuple[Any, int]] = [(parsed, 1)]
    while stack and largest <= MAX_REPEAT:
        node, outer = stack.pop()
        if isinstance(node, _regex_core.GreedyRepeat):
            outer *= max(1, node.min_count, node.max_count or 0)
            largest = max(largest, outer)
        for value in vars(node).values():
            children = value if isinstance(value, list | tuple) else (value,)
            stack.extend((child, outer) for child in children if isinstance(child, _regex_core.RegexBase))
    return largest


def check_repeats(pattern: str) -> None:
    """Refuse, before compiling, a pattern whose repeat counts exceed :data:`MAX_REPEAT` (alone or
    multiplied by nesting): compiling it could take gigabytes. Also refuses what does not parse."""
    try:
        largest = _largest_repeat(_parse(pattern))
    except (regex.error, ValueError) as exc:  # ValueError: conflicting inline flags, such as (?V1)
        raise KeywordPatternError("keyword_regex_invalid", str(exc)) from None
    except (AttributeError, TypeError) as exc:  # regex's parser changed shape: refuse rather than compile blind
        raise KeywordPatternError("keyword_regex_invalid", f"the pattern could not be checked ({exc})") from None
    if largest > MAX_REPEAT:
        raise KeywordPatternError(
            "keyword_regex_repeat_too_large",
            f"a repeat count (or the product of nested ones) exceeds {MAX_REPEAT}; use a smaller count",
        )


def compile_keyword(pattern: str) -> KeywordPattern:
    """The compiled pattern (case-insensitive, ``re`` syntax), or :class:`KeywordPatternError`.
    Repeat counts are checked first, here, so no caller (API or dispatcher) compiles an oversized one."""
    check_repeats(pattern)
    try:
        return KeywordPattern(regex.compile(pattern, _FLAGS))
    except (regex.error, ValueError) as exc:  # ValueError: conflicting inline flags, such as (?a)(?u)
        raise KeywordPatternError("keyword_regex_invalid", str(exc)) from None


def check_keyword(pattern: str) -> None:
    """Save time: it compiles, and no probe text makes it exceed the search timeout."""
    compiled = compile_keyword(pattern)
    for probe in PROBES:
        try:
            compiled.matches(probe)
        except KeywordPatternTimeout:
            raise KeywordPatternError(
                "keyword_regex_too_slow",
                "searching it backtracks for too long (nested repetition such as (a+)+ or (a|aa)+); simplify it",
            ) from None


@lru_cache(maxsize=CACHE_SIZE)
def cached_keyword(pattern: str) -> KeywordPattern | None:
    """:func:`compile_keyword` cached both ways (None: it does not compile); a pattern that timed
    out stays disabled while it is cached."""
    try:
        return compile_keyword(pattern)
    except KeywordPatternError:
        return None
