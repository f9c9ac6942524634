"""The deterministic handoff sentinel [004 D4]: keywords checked before any model call.

Matching is case- and accent-insensitive ("Falar com HUMANO", "pessoa reál")
and on whole words, so "atendente" does not fire inside "desatendente". Punctuation
and repeated spaces are ignored.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from services.runner.outcome import HandoffRequest
from switchboard.contracts.enums import HandoffTrigger, Urgency

DEFAULT_HANDOFF_KEYWORDS: tuple[str, ...] = ("falar com humano", "atendente", "pessoa real")


def fold(text: str) -> str:
    """Lowercase, accents removed, punctuation as spaces, single spaces."""
    decomposed = unicodedata.normalize("NFKD", text)
    plain = "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()
    return " ".join(re.sub(r"[^\w]+", " ", plain).split())


@dataclass(frozen=True, slots=True)
class KeywordMatch:
    keyword: str


def match_handoff_keyword(text: str, keywords: Iterable[str]) -> KeywordMatch | None:
    """The first configured keyword found in ``text``, or None."""
    haystack = f" {fold(text)} "
    for keyword in keywords:
        needle = fold(keyword)
        if needle and f" {needle} " in haystack:
            return KeywordMatch(keyword=keyword)
    return None


def keyword_handoff(match: KeywordMatch) -> HandoffRequest:
    """The handoff a keyword asks for — in the run's messages, or in one steered into it meanwhile."""
    return HandoffRequest(
        reason=f"the customer wrote the handoff keyword {match.keyword!r}",
        urgency=Urgency.NORMAL,
        trigger=HandoffTrigger.KEYWORD,
        matched_keyword=match.keyword,
    )
