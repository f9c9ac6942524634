"""Monthly usage: runs append to a ledger, a fold moves it into the counters.

A run's finish transaction appends one ``usage_entries`` row (``record_usage``): an
insert, so the runs of an org never queue on a shared row. ``fold_usage`` (every runner,
every ``RUNNER_USAGE_FOLD_S``) moves entries into ``workspace_token_usage`` and
``agent_usage_monthly`` with one atomic ``INSERT ... ON CONFLICT DO UPDATE SET x = x +
excluded.x`` per counter row, so concurrent folds lose no increment and count no entry
twice. Readers (``month_totals``, ``agent_month_totals``) add the entries not folded
yet, in the same statement (one snapshot), so a figure never lags the runs recorded.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Final

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import UUID as PG_UUID
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

# Entries folded per org and call: bounds one fold's transaction under a backlog.
FOLD_BATCH: Final = 5000


def month_start(moment: date | datetime | None = None) -> date:
    """The first day of the month of ``moment`` (UTC for datetimes; now when omitted)."""
    if moment is None:
        moment = datetime.now(UTC)
    if isinstance(moment, datetime):
        if moment.tzinfo is not None:
            moment = moment.astimezone(UTC)
        moment = moment.date()
    return moment.replace(day=1)


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """A month's counters."""

    input_tokens: int
    output_tokens: int
    cost_micros: int
    run_count: int


def _check(**values: int) -> None:
    for name, value in values.items():
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


_RECORD = text(
    "INSERT INTO usage_entries (org_id, agent_id, month, input_tokens, output_tokens, cost_micros, run_count)"
    " VALUES (:org_id, :agent_id, :month, :input_tokens, :output_tokens, :cost, :runs)"
).bindparams(bindparam("org_id", type_=PG_UUID(as_uuid=True)), bindparam("agent_id", type_=PG_UUID(as_uuid=True)))


def record_usage(
    session: Session,
    org_id: uuid.UUID,
    agent_id: uuid.UUID | None,
    at: date | datetime,
    input_tokens: int,
    output_tokens: int,
    cost: int,
    *,
    runs: int = 1,
) -> None:
    """Append usage (``cost`` in micro-USD) to the ledger, in the caller's transaction.

    ``agent_id`` None: usage of the org only (a thread summary), outside any agent's budget.
    The caller's transaction must be scoped to ``org_id`` (row-level security).
    """
    _check(input_tokens=input_tokens, output_tokens=output_tokens, cost=cost, runs=runs)
    session.execute(
        _RECORD,
        {
            "org_id": org_id,
            "agent_id": agent_id,
            "month": month_start(at),
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cost": cost,
            "runs": runs,
        },
    )


def fold_usage(connection: Connection | Session, *, limit: int = FOLD_BATCH) -> int:
    """Fold up to ``limit`` entries per org into the monthly counters; returns how many were folded.

    Needs no tenant: ``fold_usage_entries`` is a SECURITY DEFINER function that scopes itself
    org by org. Run it in a transaction of its own, the caller commits.
    """
    folded = connection.scalar(text("SELECT fold_usage_entries(:limit)"), {"limit": limit})
    return int(folded or 0)


_COUNTERS = ("input_tokens", "output_tokens", "cost_micros", "run_count")
_SUMS = ", ".join(f"sum({c})::bigint AS {c}" for c in _COUNTERS)

# One statement: the counters and the entries are read in one snapshot, so an entry being
# folded concurrently is counted once, either in the counters or still in the ledger.
_MONTH_TOTALS = text(
    f"""
WITH counted AS (
    SELECT {", ".join(_COUNTERS)} FROM workspace_token_usage WHERE org_id = :org_id AND month = :month
    UNION ALL
    SELECT {", ".join(_COUNTERS)} FROM usage_entries WHERE org_id = :org_id AND month = :month
)
SELECT count(*) AS found, {_SUMS} FROM counted
"""
).bindparams(bindparam("org_id", type_=PG_UUID(as_uuid=True)))

_AGENT_TOTALS = text(
    f"""
WITH counted AS (
    SELECT agent_id, {", ".join(_COUNTERS)} FROM agent_usage_monthly
    WHERE org_id = :org_id AND month = :month AND (CAST(:agent_id AS uuid) IS NULL OR agent_id = :agent_id)
    UNION ALL
    SELECT agent_id, {", ".join(_COUNTERS)} FROM usage_entries
    WHERE org_id = :org_id AND month = :month AND agent_id IS NOT NULL
      AND (CAST(:agent_id AS uuid) IS NULL OR agent_id = :agent_id)
)
SELECT agent_id, {_SUMS} FROM counted GROUP BY agent_id
"""
).bindparams(bindparam("org_id", type_=PG_UUID(as_uuid=True)), bindparam("agent_id", type_=PG_UUID(as_uuid=True)))


def month_totals(session: Session, org_id: uuid.UUID, month: date | datetime) -> UsageTotals | None:
    """The org's usage of the month (folded and not yet folded); None when it has none."""
    row = session.execute(_MONTH_TOTALS, {"org_id": org_id, "month": month_start(month)}).one()
    if not row.found:
        return None
    return UsageTotals(row.input_tokens, row.output_tokens, row.cost_micros, row.run_count)


def agent_month_totals(
    session: Session, org_id: uuid.UUID, month: date | datetime, *, agent_id: uuid.UUID | None = None
) -> dict[uuid.UUID, UsageTotals]:
    """Per agent of the org (or only ``agent_id``), its usage of the month (folded and not yet folded)."""
    rows = session.execute(_AGENT_TOTALS, {"org_id": org_id, "month": month_start(month), "agent_id": agent_id})
    return {
        row.agent_id: UsageTotals(row.input_tokens, row.output_tokens, row.cost_micros, row.run_count) for row in rows
    }
