"""``memory_save_fact``: an agent writes a durable fact to long-term memory (docs/memory.md).

Facts are how memory is *written* (the runner only reads them, by relevance): the agent
decides what is worth remembering, in its own words, as it does for any other tool — it is
visible in the trace and attributable to a run. The thread-summary job does not extract
facts: a summary is rewritten on every pass, a fact is meant to stay.

A fact is about this run's contact (``scope = contact``) or the whole business
(``scope = org``). Saving the same text again (case and spacing aside) refreshes the
existing row instead of adding a duplicate. A dry run saves nothing and says so.
"""

from __future__ import annotations

from typing import Any, Literal

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from services.api.mcp.tools import ToolFailure, ensure_run_going
from switchboard.db.models import Conversation
from switchboard.db.models.memory import MAX_FACT_CHARS, FactScope, FactSource, MemoryFact, normalized_fact
from switchboard.db.session import async_tenant_transaction
from switchboard.run_tokens import RunTokenClaims

FactScopeName = Literal["contact", "org"]


def normalize_fact(fact: str) -> tuple[str, str]:
    """The fact as stored (single spaces) and its dedupe key (md5 of the case-folded text)."""
    text, key = normalized_fact(fact)
    if not text:
        raise ToolFailure("fact must not be empty")
    if len(text) > MAX_FACT_CHARS:
        raise ToolFailure(f"fact must be at most {MAX_FACT_CHARS} characters: keep one short fact per call")
    return text, key


async def save_fact(
    sessions: async_sessionmaker[AsyncSession], claims: RunTokenClaims, *, fact: str, scope: FactScopeName
) -> dict[str, Any]:
    text, key = normalize_fact(fact)
    if claims.dry_run:
        return {"status": "not_saved", "reason": "dry run"}
    if claims.conversation_id is None:
        raise ToolFailure("this run has no conversation")
    async with sessions() as session, async_tenant_transaction(session, claims.org_id):
        await ensure_run_going(session, claims)
        contact_id = await session.scalar(
            select(Conversation.contact_id).where(
                Conversation.org_id == claims.org_id, Conversation.id == claims.conversation_id
            )
        )
        if scope == FactScope.CONTACT.value and contact_id is None:
            raise ToolFailure("this conversation has no single contact: save the fact with scope 'org'")
        statement = insert(MemoryFact).values(
            org_id=claims.org_id,
            scope=scope,
            contact_id=contact_id if scope == FactScope.CONTACT.value else None,
            fact=text,
            fact_key=key,
            source=FactSource.TOOL.value,
            source_run_id=claims.run_id,
            conversation_id=claims.conversation_id,
        )
        fact_id = await session.scalar(
            statement.on_conflict_do_update(
                constraint="uq_memory_facts_org_id_contact_id_fact_key",
                set_={"updated_at": func.now(), "source_run_id": statement.excluded.source_run_id},
            ).returning(MemoryFact.id)
        )
    return {"status": "saved", "fact_id": str(fact_id), "scope": scope}
