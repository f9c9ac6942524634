"""Monthly usage counters, incremented atomically.

Several runners finish runs of the same org at the same moment; a
read-modify-write would lose increments. One ``INSERT ... ON CONFLICT DO
UPDATE SET x = x + excluded.x`` is a single atomic statement instead: the
first run of the month creates the row, every other one adds to it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import cast

from sqlalchemy import Table, func
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from switchboard.db.models.autonomy import AgentUsageMonthly, WorkspaceTokenUsage


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
    """The counters of a month after an increment."""

    input_tokens: int
    output_tokens: int
    cost_micros: int
    run_count: int


def _check(**values: int) -> None:
    for name, value in values.items():
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


def _increment(
    session: Session,
    entity: type[WorkspaceTokenUsage] | type[AgentUsageMonthly],
    key: dict[str, object],
    *,
    input_tokens: int,
    output_tokens: int,
    cost: int,
    runs: int,
) -> UsageTotals:
    _check(input_tokens=input_tokens, output_tokens=output_tokens, cost=cost, runs=runs)
    counters = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cost_micros": cost,
        "run_count": runs,
    }
    table = cast(Table, entity.__table__)
    columns = table.c
    insert_stmt = insert(entity).values(**key, **counters)
    upsert = insert_stmt.on_conflict_do_update(
        index_elements=list(table.primary_key.columns),
        set_={
            **{name: columns[name] + insert_stmt.excluded[name] for name in counters},
            "updated_at": func.now(),
        },
    ).returning(*(columns[name] for name in counters))
    row = session.execute(upsert).one()
    return UsageTotals(*row)


def add_token_usage(
    session: Session,
    org_id: uuid.UUID,
    month: date | datetime,
    input_tokens: int,
    output_tokens: int,
    cost: int,
    *,
    runs: int = 1,
) -> UsageTotals:
    """Add a run's usage to the org's month (``cost`` in micro-USD) and return the new totals.

    Runs in the caller's transaction, which must be scoped to ``org_id``
    (row-level security checks the inserted row).
    """
    return _increment(
        session,
        WorkspaceTokenUsage,
        {"org_id": org_id, "month": month_start(month)},
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost=cost,
        runs=runs,
    )


def add_agent_usage(
    session: Session,
    org_id: uuid.UUID,
    agent_id: uuid.UUID,
    month: date | datetime,
    input_tokens: int,
    output_tokens: int,
    cost: int,
    *,
    runs: int = 1,
) -> UsageTotals:
    """Same as ``add_token_usage`` for one agent: the figure agent budgets are checked against."""
    return _increment(
        session,
        AgentUsageMonthly,
        {"org_id": org_id, "agent_id": agent_id, "month": month_start(month)},
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost=cost,
        runs=runs,
    )
