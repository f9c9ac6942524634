"""Two records of one fact key within a batch: the newer outcome, and a run's larger spend."""

from __future__ import annotations

from datetime import UTC, date, datetime

from services.brief.facts import Fact, merged
from switchboard.db.models.brief import BriefFactKind


def _fact(kind: BriefFactKind, minute: int, **payload: object) -> Fact:
    return Fact(kind, "k", date(2026, 11, 20), datetime(2026, 11, 20, 13, minute, tzinfo=UTC), dict(payload))


def test_a_newer_zero_usage_close_keeps_the_outcome_and_the_older_spend_in_either_order() -> None:
    spent = _fact(BriefFactKind.RUN, 0, status="failed", handed_back=True, cost_micros=3_000, tokens_in=9, tokens_out=2)
    closed = _fact(BriefFactKind.RUN, 2, status="failed", handed_back=False, cost_micros=0, tokens_in=0, tokens_out=0)
    for result in (merged(spent, closed), merged(closed, spent)):
        assert result.occurred_at == closed.occurred_at
        assert result.payload == {
            "status": "failed",
            "handed_back": False,
            "cost_micros": 3_000,
            "tokens_in": 9,
            "tokens_out": 2,
        }


def test_other_kinds_are_simply_the_newer_record() -> None:
    old = _fact(BriefFactKind.INSIGHT, 0, title="old", cost_micros=5)
    new = _fact(BriefFactKind.INSIGHT, 1, title="new")
    assert merged(old, new) is new
    assert merged(new, old) is new
