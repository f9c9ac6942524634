"""The worker-side reservoir of run starts taken from the shared per-org counter."""

from __future__ import annotations

from datetime import timedelta

from services.dispatcher.limits import Reservoir, reply_not_before
from tests.unit.dispatcher.builders import T0, agent_id

END = T0 + timedelta(seconds=60)


def test_first_request_asks_exactly_then_prefetches_a_share_of_the_limit() -> None:
    reservoir = Reservoir(prefetch_share=0.05, prefetch_cap=1000)
    assert reservoir.take_local(10, T0) == 0
    assert reservoir.request_size(10) == 10, "the limit is not known yet"
    assert reservoir.refill(10, END, 1000, 10, T0) == 10
    assert reservoir.request_size(10) == 10 + 50


def test_leftovers_serve_later_batches_of_the_same_window_only() -> None:
    reservoir = Reservoir()
    assert reservoir.refill(60, END, 1000, 10, T0) == 10
    assert reservoir.take_local(30, T0 + timedelta(seconds=1)) == 30
    assert reservoir.take_local(30, T0 + timedelta(seconds=2)) == 20
    reservoir.refill(5, END, 1000, 5, T0)
    assert reservoir.take_local(10, END - timedelta(seconds=0.1)) == 0, "not in the window's last moments"
    assert reservoir.take_local(10, END) == 0


def test_a_new_window_drops_the_old_leftovers() -> None:
    reservoir = Reservoir()
    reservoir.refill(50, END, 1000, 10, T0)
    assert reservoir.refill(3, END + timedelta(seconds=60), 1000, 3, END) == 3
    assert reservoir.left == 0


def test_a_short_grant_serves_what_it_can() -> None:
    reservoir = Reservoir()
    assert reservoir.refill(60, END, 60, 100, T0) == 60
    assert reservoir.left == 0


def test_reply_interval() -> None:
    last = {str(agent_id(1)): T0}
    assert reply_not_before(last, agent_id(1), T0 + timedelta(seconds=2), 5) == T0 + timedelta(seconds=5)
    assert reply_not_before(last, agent_id(1), T0 + timedelta(seconds=5), 5) is None
    assert reply_not_before(last, agent_id(2), T0, 5) is None
    assert reply_not_before(last, agent_id(1), T0, 0) is None
