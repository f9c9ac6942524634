"""The one line of the morning push (services/notifier/digest_push.py), read from digests the
brief really composes — so a renamed pulse field fails here, not in an owner's "0 runs"."""

from __future__ import annotations

from datetime import date
from typing import Any

from services.brief.catalog import load_catalog
from services.brief.digest import DayInputs, RunTotals, compose
from services.notifier.digest_push import payload, summary

DAY = date(2026, 12, 3)


def _digest(day: date, totals: RunTotals | None = None, *, handoffs: int = 0, todos: int = 0) -> dict[str, Any]:
    todo_items = [{"id": f"t{n}", "title": f"Call back #{n}", "status": "open"} for n in range(todos)]
    inputs = DayInputs(day=day, time_zone="Europe/Rome", totals=totals, handoffs=handoffs, todos=todo_items)
    return compose(inputs, load_catalog())


def test_yesterdays_work_and_what_waits_are_read_from_the_brief_s_digest() -> None:
    yesterday = _digest(date(2026, 12, 2), RunTotals(runs=12, replies=10, spend_micros=1_234_567), handoffs=1)
    today = _digest(DAY, todos=3)
    assert len(today["todo"]) == 3, "the brief lists the owner's to-dos"
    assert summary(today, yesterday) == (
        "Yesterday: 12 runs, 10 replies, 1 handoff, $1.23 spent. 3 items wait for you."
    )


def test_what_went_wrong_yesterday_is_in_the_line() -> None:
    bad_day = RunTotals(runs=5, replies=1, spend_micros=0, undelivered=2, unanswered=1)
    line = summary(_digest(DAY), _digest(date(2026, 12, 2), bad_day))
    assert line == (
        "Yesterday: 5 runs, 1 reply, 2 not delivered, 1 customer left unanswered, 0 handoffs, $0.00 spent. "
        "Nothing waits for you."
    )


def test_a_first_day_has_no_yesterday_and_one_item_is_singular() -> None:
    today = _digest(DAY, todos=1)
    assert summary(today, None) == "1 item waits for you."
    data = payload(today, None)
    assert data["yesterday"] is None and data["date"] == "2026-12-03" and data["digest"] == today
