"""Long-term memory in the prompt: facts per contact and per org, retrieved by relevance [002, 003].

Facts live in PostgreSQL (``memory_facts``, written by the ``memory_save_fact`` tool) with a
stored ``tsvector`` and a GIN index; retrieval is PostgreSQL's own full-text search — no
extra service (docs/memory.md). The query is built from the text the run answers: its
significant words, OR-ed, as prefixes (``delivery`` → ``delive:*`` finds "deliveries"), ranked by
``ts_rank_cd``; only facts of this contact or of the whole org are candidates. A run woken
without a customer text (a follow-up, an assignment) gets the contact's most recent facts.

The builder adds one labeled layer, **Long-term memory**, right after the thread summary's
**Memory** layer; it goes through the same pseudonymization as every other layer.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from services.runner.context import ContextBuilder, DraftBuilder
from services.runner.preload import preloaded
from services.runner.subject import RunSubject
from switchboard.contracts import RunRequested
from switchboard.db.models.memory import FACT_TS_CONFIG
from switchboard.db.session import async_tenant_transaction

LABEL: Final = "Long-term memory"
FACTS_KEY: Final = "memory_facts"
MAX_FACTS: Final = 8
MAX_QUERY_WORDS: Final = 32
MIN_WORD_CHARS: Final = 3
# Words of four letters or more match as a prefix, from six letters without their last two (see _term).
PREFIX_FROM_CHARS: Final = 4
STEM_FROM_CHARS: Final = 6
# Words too common to say anything about relevance (English, Portuguese, Italian, Spanish).
_STOP_TEXT: Final = (
    "the and for you are was with this that have not but can what when where how who why "
    "que com para por uma uns umas dos das nos nas não nao sim meu minha seu sua isso esse essa "
    "che con per non una uno del della dei degli gli sono come anche più piu "
    "los las pero mas más"
)
STOP_WORDS: Final = frozenset(_STOP_TEXT.split())

_WORD = re.compile(r"[^\W_]+", re.UNICODE)

_RELEVANT = text(
    f"""
    SELECT f.fact, f.scope, ts_rank_cd(f.search, q) AS rank
    FROM memory_facts AS f, to_tsquery('{FACT_TS_CONFIG}', :query) AS q
    WHERE f.org_id = :org_id AND (f.contact_id = :contact_id OR f.contact_id IS NULL) AND f.search @@ q
    ORDER BY rank DESC, f.updated_at DESC, f.id
    LIMIT :limit
    """
)
_RECENT = text(
    """
    SELECT f.fact, f.scope, 0.0 AS rank
    FROM memory_facts AS f
    WHERE f.org_id = :org_id AND f.contact_id = :contact_id
    ORDER BY f.updated_at DESC, f.id
    LIMIT :limit
    """
)


def fact_query(value: str) -> str | None:
    """The ``to_tsquery`` text for ``value``: significant words OR-ed (None when there are none).

    Only letters and digits reach the query, so no user text can inject tsquery operators."""
    words: list[str] = []
    for word in _WORD.findall(value.casefold()):
        if len(word) < MIN_WORD_CHARS or word in STOP_WORDS or word in words:
            continue
        words.append(word)
        if len(words) == MAX_QUERY_WORDS:
            break
    if not words:
        return None
    return " | ".join(_term(w) for w in words)


def _term(word: str) -> str:
    """A word as a query term: short words exact, others as a prefix, long ones without their last two
    letters (``delivery`` → ``delive:*`` also finds "deliveries"): a crude stemmer for every language."""
    if len(word) < PREFIX_FROM_CHARS:
        return word
    if len(word) < STEM_FROM_CHARS:
        return f"{word}:*"
    return f"{word[:-2]}:*"


@dataclass(frozen=True, slots=True)
class RetrievedFact:
    fact: str
    scope: str
    rank: float


class FactRetriever:
    """Reads the facts relevant to a run (one short tenant transaction)."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, limit: int = MAX_FACTS) -> None:
        self._sessions = sessions
        self._limit = limit

    async def relevant(self, org_id: uuid.UUID, contact_id: uuid.UUID, about: str) -> list[RetrievedFact]:
        query = fact_query(about)
        params = {"org_id": org_id, "contact_id": contact_id, "limit": self._limit}
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            if query is None:
                rows = (await session.execute(_RECENT, params)).all()
            else:
                rows = (await session.execute(_RELEVANT, {**params, "query": query})).all()
        return [RetrievedFact(r.fact, r.scope, float(r.rank)) for r in rows]


@dataclass(frozen=True, slots=True)
class PreloadedFacts:
    """Facts read for ``about`` (a turn may rewrite the text: then they are read again)."""

    about: str
    facts: list[RetrievedFact]


class FactsPreload:
    """The run's relevant facts, read with its subject (services/runner/preload.py): the queries of
    :meth:`FactRetriever.relevant` (relevant by full-text search, or the contact's latest) as one column."""

    key = FACTS_KEY
    sql = f"""
    SELECT coalesce(json_agg(json_build_array(x.fact, x.scope, x.rank) ORDER BY x.rank DESC, x.updated_at DESC, x.id),
                    '[]')
    FROM (
        SELECT f.fact, f.scope, ts_rank_cd(f.search, q) AS rank, f.updated_at, f.id
        FROM memory_facts AS f, to_tsquery('{FACT_TS_CONFIG}', :memory_facts_query) AS q
        WHERE f.org_id = :org_id AND (f.contact_id = :contact_id OR f.contact_id IS NULL) AND f.search @@ q
        UNION ALL
        SELECT f.fact, f.scope, 0.0, f.updated_at, f.id
        FROM memory_facts AS f
        WHERE CAST(:memory_facts_query AS text) IS NULL AND f.org_id = :org_id AND f.contact_id = :contact_id
        ORDER BY 3 DESC, 4 DESC, 5
        LIMIT :memory_facts_limit
    ) AS x
    """

    def __init__(self, *, limit: int = MAX_FACTS) -> None:
        self._limit = limit

    def params(self, request: RunRequested) -> Mapping[str, Any]:
        about = "\n".join(m.text for m in request.messages if m.text)  # RunSubject.inbound_text
        return {"memory_facts_query": fact_query(about), "memory_facts_limit": self._limit}

    def parse(self, value: Any, subject: RunSubject) -> object:
        facts = [RetrievedFact(str(fact), str(scope), float(rank)) for fact, scope, rank in value or ()]
        return PreloadedFacts(subject.inbound_text, facts)


class LongTermMemoryLayer:
    """The facts retrieved for this run, as one labeled layer (nothing when none is relevant)."""

    name = "long_term_memory"

    def __init__(self, retriever: FactRetriever) -> None:
        self._retriever = retriever

    async def build(self, subject: RunSubject, draft: DraftBuilder) -> None:
        request = subject.request
        read = preloaded(subject, FACTS_KEY)
        if isinstance(read, PreloadedFacts) and read.about == subject.inbound_text:
            facts = read.facts
        else:
            facts = await self._retriever.relevant(request.org_id, request.contact_id, subject.inbound_text)
        if not facts:
            return
        lines = [f"- ({'this customer' if f.scope == 'contact' else 'the business'}) {f.fact}" for f in facts]
        draft.layer(LABEL, "Facts remembered from earlier conversations, most relevant first:\n" + "\n".join(lines))


def insert_after(builders: Sequence[ContextBuilder], after: str, builder: ContextBuilder) -> list[ContextBuilder]:
    """``builders`` with ``builder`` right after the one named ``after`` (at the end when there is none)."""
    out = list(builders)
    names = [b.name for b in out]
    out.insert(names.index(after) + 1 if after in names else len(out), builder)
    return out


def with_memory(builders: Sequence[ContextBuilder], retriever: FactRetriever) -> list[ContextBuilder]:
    """``builders`` with the long-term memory layer right after the thread summary (``memory``)."""
    return insert_after(builders, "memory", LongTermMemoryLayer(retriever))
