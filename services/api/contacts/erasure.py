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

One transaction; the conversations, then the contact, are locked first (the order of every
other writer), and a contact with a run still active — running, waiting for an approval — is
refused (``409 contact_has_active_run``): that run would write its trace back after the
erasure. A run requested but not claimed yet is not run (the runner reads ``erased_at`` under
the conversation lock), a reply delivered afterwards is neither stored nor sent (the notifier
reads it too); other writers already under way (a send on the wire, the brief's next record)
can still write after the commit, and since every call runs every step again, erasing again
removes it. What the system of record cannot reach is said in the docs: records on Kafka
topics and the outbox's published rows age out with their retention.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import text
from sqlalchemy.orm import Session

from services.api.contacts.service import get_contact
from services.api.core.errors import Conflict
from switchboard.db.audit import record_audit
from switchboard.db.enums import ACTIVE_RUN_STATUSES, AWAITING_APPROVAL
from switchboard.db.models.channels import Contact

ERASED: Final = "[erased]"
# Keys whose text values are about the person, in the JSON the brief stores (facts, digest items).
TEXT_KEYS: Final = frozenset({"title", "body", "text", "summary", "reason", "final_text", "detail", "rationale"})
# Keys whose whole value is (the person's) content: a tool's arguments, a proposed message.
CONTENT_KEYS: Final = frozenset({"arguments", "proposed_action", "suggested_actions", "result"})
# Runs that would still write: held by a runner, or parked until the owner decides.
BLOCKING_RUN_STATUSES: Final = frozenset({*(str(s) for s in ACTIVE_RUN_STATUSES), AWAITING_APPROVAL})


class ContactHasActiveRun(Conflict):
    code = "contact_has_active_run"
    default_message = "A run of this contact is still active; erase once it ended (or decide its pending approval)"


# Every statement takes the same parameters (``erase_contact``'s ``params``); the order matters
# only for readability: the transaction makes them one change.
_REDACTIONS: Final[tuple[tuple[str, str], ...]] = (
    (
        "messages",
        # Their conversations' messages, and what they wrote in group chats (the group's
        # conversation: WAHA names the sender as ``participant``, their chat id; the other
        # members' messages stay). A dedupe key made of the channel's message id holds the number:
        # hashed (still unique); ours (``reply:<run id>``) stay, so a redelivered run_completed
        # still finds its reply.
        "UPDATE messages SET body = :erased, attributes = '{}'::jsonb, external_id = NULL,"
        " dedupe_key = CASE WHEN dedupe_key LIKE '%@%' THEN 'erased:' || md5(dedupe_key) ELSE dedupe_key END,"
        " delivery_error = NULL"
        " WHERE org_id = :org AND (conversation_id = ANY(:conversations) OR attributes->>'participant' = :external_id)",
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
        # A proposal still waiting is rejected: approving one would act on an erased message.
        "UPDATE agent_decisions SET proposed_action = jsonb_build_object('erased', true), rationale = NULL,"
        " execution_result = CASE WHEN execution_result IS NULL THEN NULL ELSE '{}'::jsonb END,"
        " status = CASE WHEN status = 'proposed' THEN 'rejected' ELSE status END,"
        " decided_at = CASE WHEN status = 'proposed' THEN now() ELSE decided_at END"
        " WHERE org_id = :org AND run_id = ANY(:runs)",
    ),
    (
        "workspace_insights",
        "UPDATE workspace_insights SET title = :erased, body = :erased, suggested_actions = '[]'::jsonb"
        " WHERE org_id = :org AND dedupe_key = ANY(:insight_keys)",
    ),
    (
        "workspace_todos",
        "UPDATE workspace_todos SET text = :erased WHERE org_id = :org AND conversation_id = ANY(:conversations)",
    ),
    (
        "scheduled_followups",
        # Still scheduled: cancelled (it would wake an agent on an erased conversation).
        "UPDATE scheduled_followups SET reason = :erased, context = '{}'::jsonb, error = NULL,"
        " status = CASE WHEN status = 'scheduled' THEN 'cancelled' ELSE status END,"
        " cancelled_at = CASE WHEN status = 'scheduled' THEN now() ELSE cancelled_at END"
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
        "UPDATE conversation_goals SET goal = :erased,"
        " status = CASE WHEN status = 'active' THEN 'stopped' ELSE status END"
        " WHERE org_id = :org AND conversation_id = ANY(:conversations)",
    ),
    (
        "conversations",
        "UPDATE conversations SET chat_id = 'erased:' || id::text, summary = NULL, status = 'closed',"
        " assigned_user_id = NULL WHERE org_id = :org AND id = ANY(:conversations)",
    ),
    (
        "contacts",
        "UPDATE contacts SET external_id = 'erased:' || id::text, display_name = NULL, phone_number = NULL,"
        " email = NULL, attributes = '{}'::jsonb, erased_at = coalesce(erased_at, now())"
        " WHERE org_id = :org AND id = :contact",
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


@dataclass(frozen=True, slots=True)
class _Erased:
    """What belongs to the contact, as the JSON the brief stores names it."""

    conversations: frozenset[str]
    runs: frozenset[str]
    insight_keys: frozenset[str]
    action_ids: frozenset[str]

    def about(self, item: Any) -> bool:
        return isinstance(item, dict) and (
            item.get("conversation_id") in self.conversations
            or item.get("run_id") in self.runs
            or item.get("insight_key") in self.insight_keys
            or item.get("action_id") in self.action_ids
        )

    def redacted_digest(self, digest: Any) -> Any | None:
        """The digest with its to-do items about the contact redacted; None when none is."""
        todo = digest.get("todo") if isinstance(digest, dict) else None
        if not isinstance(todo, list) or not any(self.about(item) for item in todo):
            return None
        return {**digest, "todo": [redacted(item) if self.about(item) else item for item in todo]}


def _redact_brief(session: Session, org_id: uuid.UUID, erased: _Erased) -> dict[str, int]:
    """The brief's facts of those runs, conversations and insights, the stored digests' items about
    them, and the morning pushes that carried them: texts go, counts stay (a recomposition reads
    the runs, which are kept)."""
    keys = {
        "org": org_id,
        "runs": sorted(erased.runs),
        "conversations": sorted(erased.conversations),
        "insight_keys": sorted(erased.insight_keys),
    }
    facts = session.execute(
        text(
            "SELECT kind, fact_key, payload FROM brief_facts WHERE org_id = :org"
            " AND (payload->>'run_id' = ANY(:runs) OR payload->>'conversation_id' = ANY(:conversations)"
            " OR (kind = 'insight' AND fact_key = ANY(:insight_keys)))"
        ),
        keys,
    ).all()
    for kind, key, payload in facts:
        session.execute(
            text(
                "UPDATE brief_facts SET payload = CAST(:payload AS jsonb)"
                " WHERE org_id = :org AND kind = :kind AND fact_key = :key"
            ),
            {"org": org_id, "kind": kind, "key": key, "payload": json.dumps(redacted(payload))},
        )
    digests = 0
    for day, digest in session.execute(
        text("SELECT day, digest FROM workspace_daily_briefs WHERE org_id = :org"), {"org": org_id}
    ).all():
        rewritten = erased.redacted_digest(digest)
        if rewritten is not None:
            session.execute(
                text(
                    "UPDATE workspace_daily_briefs SET digest = CAST(:digest AS jsonb)"
                    " WHERE org_id = :org AND day = :day"
                ),
                {"org": org_id, "day": day, "digest": json.dumps(rewritten)},
            )
            digests += 1
    pushes = 0
    for notification_id, payload in session.execute(
        text("SELECT id, payload FROM org_notifications WHERE org_id = :org AND event_type = 'home.digest'"),
        {"org": org_id},
    ).all():
        rewritten = erased.redacted_digest(payload.get("digest") if isinstance(payload, dict) else None)
        if rewritten is not None:
            session.execute(
                text("UPDATE org_notifications SET payload = CAST(:payload AS jsonb) WHERE org_id = :org AND id = :id"),
                {"org": org_id, "id": notification_id, "payload": json.dumps({**payload, "digest": rewritten})},
            )
            pushes += 1
    return {"brief_facts": len(facts), "workspace_daily_briefs": digests, "home_digest_notifications": pushes}


def erase_contact(
    session: Session, org_id: uuid.UUID, contact_id: uuid.UUID, *, actor_user_id: uuid.UUID | None, request_id: str
) -> Contact:
    """Erase the contact's personal data (see the module docstring). Every call runs every step
    (each is idempotent): erasing again removes what a writer already under way when the first
    erasure committed put back (docs/api.md "Erasing a contact")."""
    # The other writers' lock order: the conversation first, then the contact, then follow-ups.
    conversations = list(
        session.scalars(
            text("SELECT id FROM conversations WHERE org_id = :org AND contact_id = :contact ORDER BY id FOR UPDATE"),
            {"org": org_id, "contact": contact_id},
        )
    )
    contact = get_contact(session, org_id, contact_id, for_update=True)
    runs = list(
        session.execute(
            text(
                "SELECT id, status FROM ai_agent_runs WHERE org_id = :org"
                " AND (contact_id = :contact OR conversation_id = ANY(:conversations))"
            ),
            {"org": org_id, "contact": contact_id, "conversations": conversations},
        )
    )
    active = [str(run_id) for run_id, status in runs if status in BLOCKING_RUN_STATUSES]
    if active:
        raise ContactHasActiveRun(details={"run_ids": active})
    run_ids = [run_id for run_id, _ in runs]
    action_ids = list(
        session.scalars(
            text("SELECT id FROM agent_decisions WHERE org_id = :org AND run_id = ANY(:runs)"),
            {"org": org_id, "runs": run_ids},
        )
    )
    insight_keys = list(
        session.scalars(
            text(
                "SELECT dedupe_key FROM workspace_insights WHERE org_id = :org"
                " AND (run_id = ANY(:runs) OR agent_decision_id = ANY(:actions))"
            ),
            {"org": org_id, "runs": run_ids, "actions": action_ids},
        )
    )
    erased = _Erased(
        conversations=frozenset(str(c) for c in conversations),
        runs=frozenset(str(r) for r in run_ids),
        insight_keys=frozenset(insight_keys),
        action_ids=frozenset(str(a) for a in action_ids),
    )
    params = {
        "org": org_id,
        "contact": contact_id,
        "conversations": conversations,
        "runs": run_ids,
        "conversation_texts": sorted(erased.conversations),
        "run_texts": sorted(erased.runs),
        "insight_keys": insight_keys,
        "external_id": contact.external_id,  # their chat id, as group messages name the sender
        "erased": ERASED,
    }
    touched: dict[str, int] = {}
    for table, statement in _REDACTIONS:
        touched[table] = session.execute(text(statement), params).rowcount  # type: ignore[attr-defined]
    touched |= _redact_brief(session, org_id, erased)
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
