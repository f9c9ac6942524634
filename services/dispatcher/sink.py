"""The decision sink: ``dispatch_decisions`` topic -> ``dispatch_decisions`` table.

Runs in the dispatcher process with its own consumer group, through the shared
``RecordConsumer`` (decode, retry, dead-letter, commit after the write). Each partition
batch is written with one tenant transaction per org: one ``INSERT ... SELECT`` over the
batch's rows, ``ON CONFLICT (decision_id) DO NOTHING`` so a replayed or recomputed
decision is stored once.

References are joined in under the org's row-level security rather than trusted: a
conversation, message, agent or version the org cannot see (deleted since, or not its
own) is stored as NULL instead of failing the batch on a foreign key. A decision for an
org that does not exist (deleted) is dropped with a warning.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import text

from switchboard.contracts import DispatchDecided
from switchboard.db.session import async_tenant_transaction
from switchboard.kafka.consumer import Inbound
from switchboard.kafka.errors import PermanentRecordError
from switchboard.observability.logging import get_logger

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

log = get_logger(__name__)

_INSERT = text(
    """
    INSERT INTO dispatch_decisions (
        org_id, decision_id, dispatch_event_id, outcome, conversation_id, inbound_message_id,
        agent_id, agent_version_id, run_id, wake_reason, is_dry_run, details, created_at)
    SELECT o.id, d.decision_id, d.dispatch_event_id, d.outcome, c.id, m.id,
           a.id, v.id, d.run_id, d.wake_reason, d.dry_run, d.details, d.created_at
    FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS d(
        decision_id uuid, dispatch_event_id uuid, outcome text, conversation_id uuid, message_id uuid,
        agent_id uuid, version_id uuid, run_id uuid, wake_reason text, dry_run boolean,
        details jsonb, created_at timestamptz)
    JOIN organizations AS o ON o.id = CAST(:org AS uuid)
    LEFT JOIN conversations AS c ON c.id = d.conversation_id AND c.org_id = o.id
    LEFT JOIN messages AS m ON m.id = d.message_id AND m.org_id = o.id
    LEFT JOIN ai_agents AS a ON a.id = d.agent_id AND a.org_id = o.id
    LEFT JOIN ai_agent_versions AS v ON v.id = d.version_id AND v.org_id = o.id
    ON CONFLICT (decision_id) DO NOTHING
    """
)


def decision_row(record: DispatchDecided) -> dict[str, Any]:
    """The table row of a decision; what has no column goes into ``details``."""
    try:
        details = json.loads(record.details_json) if record.details_json else {}
    except ValueError:
        details = {"unparsed_details": record.details_json}
    if not isinstance(details, dict):
        details = {"details": details}
    details.update(
        {
            "reason": record.reason,
            "not_before": record.not_before.isoformat() if record.not_before else None,
            "message_ids": [str(m) for m in record.message_ids],
            "dispatch_ids": [str(d) for d in record.dispatch_ids],
            "attempt": record.attempt,
            "parent_run_id": str(record.parent_run_id) if record.parent_run_id else None,
            "request_id": record.request_id,
        }
    )
    return {
        "decision_id": str(record.event_id),
        "dispatch_event_id": str(record.dispatch_event_id),
        "outcome": record.outcome.value,
        "conversation_id": str(record.conversation_id),
        "message_id": str(record.message_ids[0]) if record.message_ids else None,
        "agent_id": str(record.agent_id) if record.agent_id else None,
        "version_id": str(record.version_id) if record.version_id else None,
        "run_id": str(record.run_id) if record.run_id else None,
        "wake_reason": record.wake_reason.value,
        "dry_run": record.dry_run,
        "details": {k: v for k, v in details.items() if v is not None},
        "created_at": record.occurred_at.isoformat(),
    }


class DecisionSink:
    """The ``batch_handler`` of the sink's ``RecordConsumer``."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def write(self, batch: Sequence[Inbound]) -> None:
        by_org: dict[uuid.UUID, list[dict[str, Any]]] = defaultdict(list)
        for inbound in batch:
            record = inbound.value
            if not isinstance(record, DispatchDecided):
                raise PermanentRecordError("unexpected_record", f"not a decision: {type(record).__name__}")
            by_org[record.org_id].append(decision_row(record))
        for org_id, rows in by_org.items():
            async with self._engine.connect() as conn, async_tenant_transaction(conn, org_id):
                result = await conn.execute(_INSERT, {"rows": json.dumps(rows), "org": str(org_id)})
            stored = result.rowcount if result.rowcount is not None and result.rowcount >= 0 else len(rows)
            if stored == 0 and not await self._org_exists(org_id):
                log.warning("decisions for an unknown organization dropped", extra={"organization_id": str(org_id)})

    async def _org_exists(self, org_id: uuid.UUID) -> bool:
        async with self._engine.connect() as conn, async_tenant_transaction(conn, org_id):
            found = await conn.execute(text("SELECT 1 FROM organizations WHERE id = :o"), {"o": org_id})
            return found.first() is not None
