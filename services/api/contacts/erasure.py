"""Erasing a contact: their personal data goes from every table, what billing and the audit
need stays, stripped (docs/api.md "Erasing a contact").

A business must be able to honour "forget me" (GDPR art. 17, LGPD art. 18): the customer's
name, number, e-mail, every message of their conversations, what the agents remember of them
(summaries, facts, state notes, goals), the traces, prompts and texts of the runs that served
them, the proposals made for them, the owner's to-dos and Home items about them. Rows are
redacted rather than deleted where other rows or the books refer to them: a run keeps its
status, tokens and cost (the month's usage and the invoices must still add up), a message its
direction and time, a decision its type and outcome. The contact row stays, ``erased_at`` set,
its ids replaced by ``erased:<id>``: the same number writing again is a new contact with a new
conversation, and nothing links the two.

One transaction; the contact and its conversations are locked first (the lock every writer of
a conversation takes), and a contact with a run still active — queued, running, waiting for an
approval — is refused (``409 contact_has_active_run``): that run would write its trace back
after the erasure. What the system of record cannot reach is said in the docs: records still
on Kafka topics age out with their retention.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Final

from sqlalchemy import text
from sqlalchemy.orm import Session

from services.api.contacts.service import get_contact
from services.api.core.errors import Conflict
from switchboard.db.audit import record_audit
from switchboard.db.models.channels import Contact

ERASED: Final = "[erased]"
# Keys whose text values are about the person, in the JSON the brief stores (facts, digest items).
TEXT_KEYS: Final = frozenset({"title", "body", "text", "summary", "reason", "final_text", "detail", "rationale"})
# Keys whose whole value is (the person's) content: a tool's arguments, a proposed message.
CONTENT_KEYS: Final = frozenset({"arguments", "proposed_action", "suggested_actions", "result"})
ACTIVE_RUN_STATUSES: Final = ("pending", "running", "awaiting_approval")


class ContactHasActiveRun(Conflict):
    code = "contact_has_active_run"
    default_message = "A run of this contact is still active; erase once it ended (or decide its pending approval)"


# Each statement takes :org, :contact, :conversations (uuid[]) and :runs (uuid[]). Order matters
# only for readability; the transaction makes them one change.
_REDACTIONS: Final[tuple[tuple[str, str], ...]] = (
    (
        "messages",
        "UPDATE messages SET body = :erased, attributes = '{}'::jsonb, external_id = NULL,"
        " dedupe_key = 'erased:' || id::text, delivery_error = NULL"
        " WHERE org_id = :org AND conversation_id = ANY(:conversations)",
    ),
    (
        "run_deliveries",
        "UPDATE run_deliveries SET external_id = NULL, error_message = NULL"
        " WHERE org_id = :org AND (run_id = ANY(:runs) OR message_id IN"
        " (SELECT id FROM messages WHERE org_id = :org AND conversation_id = ANY(:conversations)))",
    ),
    (
        "ai_agent_runs",
        "UPDATE ai_agent_runs SET tool_calls = '[]'::jsonb, prompt = NULL, final_text = NULL, summary = NULL,"
        " error_message = NULL, would_send_to = NULL, classification = NULL, wake_context = '{}'::jsonb,"
        " actions_executed = '[]'::jsonb, actions_proposed = '[]'::jsonb"
        " WHERE org_id = :org AND id = ANY(:runs)",
    ),
    (
        "agent_decisions",
        "UPDATE agent_decisions SET proposed_action = jsonb_build_object('erased', true), rationale = NULL,"
        " execution_result = CASE WHEN execution_result IS NULL THEN NULL ELSE '{}'::jsonb END"
        " WHERE org_id = :org AND run_id = ANY(:runs)",
    ),
    (
        "workspace_insights",
        "UPDATE workspace_insights SET title = :erased, body = :erased, suggested_actions = '[]'::jsonb"
        " WHERE org_id = :org AND run_id = ANY(:runs)",
    ),
    (
        "workspace_todos",
        "UPDATE workspace_todos SET text = :erased WHERE org_id = :org AND conversation_id = ANY(:conversations)",
    ),
    (
        "scheduled_followups",
        "UPDATE scheduled_followups SET reason = :erased, context = '{}'::jsonb, error = NULL"
        " WHERE org_id = :org AND (contact_id = :contact OR conversation_id = ANY(:conversations))",
    ),
    (
        "dispatch_decisions",
        "UPDATE dispatch_decisions SET details = '{}'::jsonb"
        " WHERE org_id = :org AND conversation_id = ANY(:conversations)",
    ),
    (
        "org_notifications",
        "UPDATE org_notifications SET payload = '{}'::jsonb"
        " WHERE org_id = :org AND (payload->>'conversation_id' = ANY(CAST(:conversation_texts AS text[]))"
        " OR payload->>'run_id' = ANY(CAST(:run_texts AS text[])))",
    ),
    (
        "memory_facts",
        "DELETE FROM memory_facts WHERE org_id = :org"
        " AND (contact_id = :contact OR conversation_id = ANY(:conversations))",
    ),
    (
        "conversation_summaries",
        "DELETE FROM conversation_summaries WHERE org_id = :org AND conversation_id = ANY(:conversations)",
    ),
    (
        "conversation_state_notes",
        "DELETE FROM conversation_state_notes WHERE org_id = :org AND conversation_id = ANY(:conversations)",
    ),
    (
        "conversation_goals",
        "UPDATE conversation_goals SET goal = :erased WHERE org_id = :org AND conversation_id = ANY(:conversations)",
    ),
    (
        "conversations",
        "UPDATE conversations SET chat_id = 'erased:' || id::text, summary = NULL, status = 'closed',"
        " assigned_user_id = NULL WHERE org_id = :org AND id = ANY(:conversations)",
    ),
    (
        "contacts",
        "UPDATE contacts SET external_id = 'erased:' || id::text, display_name = NULL, phone_number = NULL,"
        " email = NULL, attributes = '{}'::jsonb, erased_at = now() WHERE org_id = :org AND id = :contact",
    ),
)


def redacted(value: Any) -> Any:
    """``value`` with every text about the person replaced; ids, types, counts and states kept
    (the digest still counts "sent 3 WhatsApp messages", it no longer says to whom or what)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key in CONTENT_KEYS:
                out[key] = {} if isinstance(item, dict) else [] if isinstance(item, list) else None
            elif key in TEXT_KEYS and isinstance(item, str):
                out[key] = ERASED
            else:
                out[key] = redacted(item)
        return out
    if isinstance(value, list):
        return [redacted(item) for item in value]
    return value


def _about(item: Any, conversations: set[str], runs: set[str]) -> bool:
    return isinstance(item, dict) and (item.get("conversation_id") in conversations or item.get("run_id") in runs)


def _redact_brief(session: Session, org_id: uuid.UUID, conversations: set[str], runs: set[str]) -> dict[str, int]:
    """The brief's facts of those runs and conversations and the stored digests' items about them:
    their texts go, their counts stay (a recomposition reads the runs, which are kept)."""
    facts = session.execute(
        text(
            "SELECT kind, fact_key, payload FROM brief_facts WHERE org_id = :org"
            " AND (payload->>'run_id' = ANY(:runs) OR payload->>'conversation_id' = ANY(:conversations))"
        ),
        {"org": org_id, "runs": sorted(runs), "conversations": sorted(conversations)},
    ).all()
    for kind, key, payload in facts:
        session.execute(
            text(
                "UPDATE brief_facts SET payload = CAST(:payload AS jsonb)"
                " WHERE org_id = :org AND kind = :kind AND fact_key = :key"
            ),
            {"org": org_id, "kind": kind, "key": key, "payload": json.dumps(redacted(payload))},
        )
    digests = session.execute(
        text("SELECT day, digest FROM workspace_daily_briefs WHERE org_id = :org"), {"org": org_id}
    ).all()
    rewritten = 0
    for day, digest in digests:
        todo = digest.get("todo") if isinstance(digest, dict) else None
        if not isinstance(todo, list) or not any(_about(item, conversations, runs) for item in todo):
            continue
        digest["todo"] = [redacted(item) if _about(item, conversations, runs) else item for item in todo]
        session.execute(
            text(
                "UPDATE workspace_daily_briefs SET digest = CAST(:digest AS jsonb) WHERE org_id = :org AND day = :day"
            ),
            {"org": org_id, "day": day, "digest": json.dumps(digest)},
        )
        rewritten += 1
    return {"brief_facts": len(facts), "workspace_daily_briefs": rewritten}


def erase_contact(
    session: Session, org_id: uuid.UUID, contact_id: uuid.UUID, *, actor_user_id: uuid.UUID | None, request_id: str
) -> Contact:
    """Erase the contact's personal data (see the module docstring); an erased contact is left as it is."""
    contact = get_contact(session, org_id, contact_id, for_update=True)
    if contact.erased_at is not None:
        return contact
    conversations = list(
        session.scalars(
            text("SELECT id FROM conversations WHERE org_id = :org AND contact_id = :contact ORDER BY id FOR UPDATE"),
            {"org": org_id, "contact": contact_id},
        )
    )
    runs = list(
        session.execute(
            text(
                "SELECT id, status FROM ai_agent_runs WHERE org_id = :org"
                " AND (contact_id = :contact OR conversation_id = ANY(:conversations))"
            ),
            {"org": org_id, "contact": contact_id, "conversations": conversations},
        )
    )
    active = [str(run_id) for run_id, status in runs if status in ACTIVE_RUN_STATUSES]
    if active:
        raise ContactHasActiveRun(details={"run_ids": active})
    run_ids = [run_id for run_id, _ in runs]
    conversation_texts, run_texts = [str(c) for c in conversations], [str(r) for r in run_ids]
    params = {
        "org": org_id,
        "contact": contact_id,
        "conversations": conversations,
        "runs": run_ids,
        "conversation_texts": conversation_texts,
        "run_texts": run_texts,
        "erased": ERASED,
    }
    touched: dict[str, int] = {}
    for table, statement in _REDACTIONS:
        touched[table] = session.execute(text(statement), params).rowcount  # type: ignore[attr-defined]
    touched |= _redact_brief(session, org_id, set(conversation_texts), set(run_texts))
    record_audit(
        session,
        org_id=org_id,
        action="contact.erased",
        actor_user_id=actor_user_id,
        target_type="contact",
        target_id=contact_id,
        # Counts only: what was erased is exactly what must not be written down again.
        details={"rows": {table: count for table, count in touched.items() if count}},
        request_id=request_id,
    )
    session.flush()
    session.refresh(contact)
    return contact
