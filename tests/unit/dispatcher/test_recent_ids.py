"""A conversation's idempotency memory: bounded, oldest dropped first, read back from the
JSON lists that states written before it hold."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

from services.dispatcher import recent_ids
from services.dispatcher.state import CLOSED_RUN_MEMORY, HANDLED_MEMORY, ConversationState


def _state() -> ConversationState:
    return ConversationState.empty(uuid.uuid4(), uuid.uuid4(), datetime(2026, 12, 2, tzinfo=UTC))


def test_the_newest_keys_and_runs_are_remembered_and_the_oldest_forgotten() -> None:
    state = _state()
    keys = [str(uuid.uuid4()) for _ in range(HANDLED_MEMORY + 10)]
    runs = [uuid.uuid4() for _ in range(CLOSED_RUN_MEMORY + 3)]
    for key in keys:
        state.remember(key)
    for run in runs:
        state.close_run(run)
    state.close_run(runs[-1])  # closing twice keeps one entry

    again = ConversationState.from_bytes(state.to_bytes())
    assert [again.has_seen(k) for k in (keys[-1], keys[-HANDLED_MEMORY])] == [True, True]
    assert [again.has_seen(k) for k in (keys[0], keys[-HANDLED_MEMORY - 1], "never")] == [False, False, False]
    assert again.is_closed(runs[-1]) and again.is_closed(runs[-CLOSED_RUN_MEMORY])
    assert not again.is_closed(runs[-CLOSED_RUN_MEMORY - 1]) and not again.is_closed(uuid.uuid4())
    assert len(again.handled) == HANDLED_MEMORY * 2 * recent_ids.KEY_DIGEST_BYTES
    assert len(again.closed_runs) == CLOSED_RUN_MEMORY * 32
    # The point: a long-lived conversation's state stays small (it was 23 KB as JSON lists).
    assert len(state.to_bytes()) < 11_000


def test_a_match_must_start_on_an_entry() -> None:
    entries = ["0123456789abcdef", "fedcba9876543210"]
    packed = recent_ids.pack(entries, 10)
    assert recent_ids.contains(packed, "fedcba9876543210")
    assert not recent_ids.contains(packed, "89abcdeffedcba98"), "straddles two entries"


def test_a_state_written_with_lists_reads_as_the_same_memory() -> None:
    state = _state()
    keys = [str(uuid.uuid4()) for _ in range(HANDLED_MEMORY + 5)]
    runs = [uuid.uuid4() for _ in range(CLOSED_RUN_MEMORY + 2)]
    document = json.loads(state.to_bytes())
    document["handled"] = keys
    document["closed_runs"] = [str(r) for r in runs]
    before = ConversationState.from_bytes(json.dumps(document).encode())
    assert before.has_seen(keys[-1]) and not before.has_seen(keys[0])
    assert before.is_closed(runs[-1]) and not before.is_closed(runs[0])
    for key in keys:
        state.remember(key)
    for run in runs:
        state.close_run(run)
    assert (before.handled, before.closed_runs) == (state.handled, state.closed_runs)
