"""The processor's table adapter on faust's own in-memory store (no broker: faust's store logic)."""

from __future__ import annotations

import tempfile

import faust
import pytest
from faust.types import TP

from services.dispatcher.app import DispatcherApp, TableStore
from services.dispatcher.settings import DispatcherSettings

CHANGELOG = "x-conversations-changelog"


async def test_a_rebalance_drops_the_states_of_partitions_this_worker_no_longer_holds() -> None:
    """faust drops a revoked partition's keys by its key -> partition map; a state the processor
    wrote must be in it, or a stale copy of a conversation another worker now owns stays here."""
    app = faust.App("x", store="memory://", datadir=tempfile.mkdtemp(), autodiscover=False, web_enabled=False)
    table = app.Table("conversations", default=None, partitions=4, key_type=bytes, value_type=bytes)
    store = TableStore(table)
    store.set(b"kept", b"state-0", 0)
    store.set(b"moved", b"state-3", 3)
    store.set(b"ended", b"state-1", 1)
    store.set(b"ended", None, 1)  # a conversation whose state ended: gone from the map too

    await table.data.on_recovery_completed({TP(CHANGELOG, 0), TP(CHANGELOG, 1)}, set())

    assert dict(store.items()) == {b"kept": b"state-0"}
    assert store.get(b"moved") is None


async def _noop() -> None:
    return None


def test_readiness_holds_through_a_later_rebalance_once_the_table_was_recovered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The probe stays ready while a peer's eviction rebalances the group (recovery may outlast the
    probe's patience); before the first recovery it is not ready."""
    app = DispatcherApp(DispatcherSettings(), on_batch=lambda _: _noop(), on_timer=_noop, on_rebalanced=lambda: None)
    rebalancing = {"now": True}
    monkeypatch.setattr(type(app.app), "rebalancing", property(lambda _: rebalancing["now"]))  # faust's flag
    assert not app.serving, "not ready before any partition was recovered"
    app.rebalances = 1
    rebalancing["now"] = False
    assert app.ready and app.serving
    rebalancing["now"] = True  # a peer left: the group rebalances and this worker recovers partitions
    assert not app.ready, "the timer still waits for the recovery"
    assert app.serving, "the probe does not take the worker out of the PDB's count"
