"""What the brief keeps of each consumed record: one ``brief_facts`` row (pure mapping here).

Dry runs and dry handoffs are test traffic [004 §9]: they never reach the digest.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date, datetime
from typing import Any, Final
from zoneinfo import ZoneInfo

from switchboard.contracts.enums import RunStatus
from switchboard.contracts.records import Action, HandoffTriggered, Insight, Record, RunCompleted
from switchboard.db.daily_brief import local_day
from switchboard.db.models.brief import BriefFactKind
from switchboard.run_outcomes import handed_back, left_unanswered

# What a run spent. Two records of one run id can disagree on it: the dispatcher closes a run
# whose last attempt was handed back (or went silent) with a zero-usage ``run_completed`` that
# is newer than the runner's own. The larger of the two is what the run spent.
SPEND_FIELDS: Final = ("cost_micros", "tokens_in", "tokens_out")


@dataclass(frozen=True, slots=True)
class Fact:
    kind: BriefFactKind
    key: str
    day: date
    occurred_at: datetime
    payload: dict[str, Any]


def merged(stored: Fact, arriving: Fact) -> Fact:
    """Two records of one key: the newer one's day and outcome, and for a run the larger spend.

    The same rule as the SQL upsert (``store.upsert_facts``), for records of one batch.
    """
    newer, older = (arriving, stored) if stored.occurred_at <= arriving.occurred_at else (stored, arriving)
    if newer.kind is not BriefFactKind.RUN:
        return newer
    spend = {name: max(newer.payload.get(name) or 0, older.payload.get(name) or 0) for name in SPEND_FIELDS}
    return replace(newer, payload={**newer.payload, **spend})


def _action(action: Action) -> dict[str, Any]:
    return {
        "action_id": str(action.action_id),
        "action_type": action.action_type,
        "area": action.area,
        "summary": action.summary,
    }


def replied(record: RunCompleted) -> bool:
    """A reply exists for the customer: a completed run with text and a place to send it."""
    return record.status is RunStatus.COMPLETED and bool(record.final_text) and record.would_send_to is not None


def run_fact(record: RunCompleted, tz: ZoneInfo) -> Fact:
    return Fact(
        kind=BriefFactKind.RUN,
        key=str(record.run_id),
        day=local_day(record.completed_at, tz),
        occurred_at=record.completed_at,
        payload={
            "run_id": str(record.run_id),
            "agent_id": str(record.agent_id),
            "status": str(record.status),
            "replied": replied(record),
            # The shared reading of the outcome (switchboard.run_outcomes): a hand-back is spend,
            # not a run of the day; an unanswered customer is shown on the pulse.
            "handed_back": handed_back(record),
            "unanswered": left_unanswered(record),
            "cost_micros": record.cost_micro_usd,
            "tokens_in": record.tokens_in,
            "tokens_out": record.tokens_out,
            "executed": [_action(a) for a in record.actions_executed],
            "proposed": [_action(a) for a in record.actions_proposed],
        },
    )


def handoff_fact(record: HandoffTriggered, tz: ZoneInfo) -> Fact:
    return Fact(
        kind=BriefFactKind.HANDOFF,
        key=str(record.run_id),
        day=local_day(record.occurred_at, tz),
        occurred_at=record.occurred_at,
        payload={
            "run_id": str(record.run_id),
            "agent_id": str(record.agent_id),
            "reason": record.reason,
            "urgency": str(record.urgency),
        },
    )


def insight_fact(record: Insight) -> Fact:
    """Keyed by insight key; the producer dated it (``insight_date``, the org's day)."""
    return Fact(
        kind=BriefFactKind.INSIGHT,
        key=record.insight_key,
        day=record.insight_date,
        occurred_at=record.occurred_at,
        payload={
            "insight_id": str(record.insight_id),
            "insight_key": record.insight_key,
            "kind": str(record.kind),
            "area": record.area,
            "title": record.title,
            "body": record.body,
            "status": str(record.status),
            "suggested_actions": [a.model_dump(mode="json") for a in record.suggested_actions],
            "proposed_action": None if record.proposed_action is None else _action(record.proposed_action),
        },
    )


def fact_for(record: Record, tz: ZoneInfo) -> Fact | None:
    """The fact of a consumed record, or None when it does not count (dry runs)."""
    if isinstance(record, RunCompleted):
        return None if record.dry_run else run_fact(record, tz)
    if isinstance(record, HandoffTriggered):
        return None if record.dry_run else handoff_fact(record, tz)
    if isinstance(record, Insight):
        return insight_fact(record)
    return None
