"""The no-match watch [004 §8.2]: a sliding window per org, a gauge, one warning per window."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

import pytest

from services.dispatcher.metrics import NO_MATCH_ALERT, NO_MATCH_RATE, NoMatchWatch
from switchboard.contracts import DispatchOutcome
from tests.unit.dispatcher.builders import ORG, OTHER_ORG, T0


def test_rate_over_the_window_raises_the_alert_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    watch = NoMatchWatch(window_s=60, threshold=0.30, min_dispatches=10)
    with caplog.at_level(logging.WARNING, logger="services.dispatcher.metrics"):
        for i in range(6):
            watch.record(ORG, DispatchOutcome.DISPATCHED, T0 + timedelta(seconds=i))
        for i in range(4):
            watch.record(ORG, DispatchOutcome.NO_MATCH, T0 + timedelta(seconds=10 + i))
        watch.publish()
        assert watch.rate(ORG) == pytest.approx(0.4)
        assert NO_MATCH_RATE.labels(str(ORG))._value.get() == pytest.approx(0.4)
        assert NO_MATCH_ALERT.labels(str(ORG))._value.get() == 1
        watch.record(ORG, DispatchOutcome.NO_MATCH, T0 + timedelta(seconds=20))
    warnings = [r for r in caplog.records if r.getMessage() == "no_match rate above threshold"]
    assert len(warnings) == 1, "once per window, not per dispatch"


def test_old_dispatches_leave_the_window_and_few_dispatches_never_alert() -> None:
    watch = NoMatchWatch(window_s=60, threshold=0.30, min_dispatches=10)
    for i in range(20):
        watch.record(OTHER_ORG, DispatchOutcome.NO_MATCH, T0 + timedelta(seconds=i))
    for i in range(10):
        watch.record(OTHER_ORG, DispatchOutcome.QUEUED, T0 + timedelta(seconds=200 + i))
    watch.publish()
    assert watch.rate(OTHER_ORG) == 0.0
    assert NO_MATCH_ALERT.labels(str(OTHER_ORG))._value.get() == 0
    lonely = NoMatchWatch(min_dispatches=10)
    lonely.record(ORG, DispatchOutcome.NO_MATCH, T0)
    lonely.publish()
    assert lonely.rate(ORG) == 1.0


def test_an_org_that_went_quiet_stops_alerting_when_its_window_empties() -> None:
    """The window moves with time (the timer's ``expire``), not only with the org's own traffic:
    an alert raised by a burst of misses drops once they are older than the window, and an org
    with nothing left in it is forgotten (its gauges removed, not left at 1)."""
    org = uuid.uuid4()
    watch = NoMatchWatch(window_s=60, threshold=0.30, min_dispatches=10)
    for i in range(10):
        watch.record(org, DispatchOutcome.NO_MATCH, T0 + timedelta(seconds=i))
    watch.publish()
    assert NO_MATCH_ALERT.labels(str(org))._value.get() == 1
    watch.expire(T0 + timedelta(seconds=30))  # still inside the window: unchanged
    assert NO_MATCH_ALERT.labels(str(org))._value.get() == 1
    watch.expire(T0 + timedelta(seconds=120))
    samples = {(s.name, s.labels.get("org")) for m in NO_MATCH_ALERT.collect() for s in m.samples}
    assert not any(label == str(org) for _, label in samples), "a quiet org's gauge is removed"
    assert watch.rate(org) == 0.0
