"""A run whose classification filter did not match re-dispatches excluding its agent (issue 6 item 9):
selection never chooses an excluded agent, and the re-dispatch waits for the run that sent it."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from services.dispatcher.selection import select
from switchboard.contracts import ConcurrencyPolicy, DispatchOutcome, DispatchRequested, RunStatus
from tests.unit.dispatcher.builders import T0, agent_id, completed, dispatch, index_of, snapshot
from tests.unit.dispatcher.test_policy import Conv, outcomes, runs


def excluding(*numbers: int, text: str = "quero pagar o boleto") -> DispatchRequested:
    return dispatch(text).model_copy(update={"excluded_agent_ids": tuple(agent_id(n) for n in numbers)})


@pytest.mark.parametrize(
    ("excluded", "chosen", "considered"),
    [
        ((), 1, [(1, "chosen")]),
        ((1,), 2, [(1, "excluded"), (2, "chosen")]),
        ((1, 2), 3, [(1, "excluded"), (2, "excluded"), (3, "chosen")]),
        ((2,), 1, [(1, "chosen")]),
        ((1, 2, 3), None, [(1, "excluded"), (2, "excluded"), (3, "excluded")]),
    ],
)
def test_selection_skips_excluded_agents_in_dispatch_order(
    excluded: tuple[int, ...], chosen: int | None, considered: list[tuple[int, str]]
) -> None:
    index = index_of(snapshot(1, priority=30), snapshot(2, priority=20), snapshot(3, priority=10))
    selection = select(index, excluding(*excluded))
    assert (selection.choice.agent_id if selection.choice else None) == (agent_id(chosen) if chosen else None)
    assert list(selection.considered) == [(agent_id(n), why) for n, why in considered]
    if chosen is None:
        assert selection.reason == "no trigger matched"


def test_a_dispatch_without_exclusions_reads_like_before() -> None:
    plain = dispatch()
    assert plain.excluded_agent_ids == ()
    assert select(index_of(snapshot(1)), plain).choice is not None


@pytest.mark.parametrize("policy", list(ConcurrencyPolicy))
def test_the_redispatch_waits_for_the_excluded_run_then_goes_to_the_next_agent(policy: ConcurrencyPolicy) -> None:
    conv = Conv(index_of(snapshot(1, priority=10, policy=policy), snapshot(2)))
    first = dispatch("quero pagar o boleto")
    (run,) = runs(conv.send(first))
    assert run.agent_id == agent_id(1)
    # The runner's re-dispatch may reach the dispatcher before its run_completed: whatever the
    # active run's policy, it is queued (never steered into, refused or interrupting that run).
    again = first.model_copy(update={"event_id": uuid.uuid4(), "excluded_agent_ids": (agent_id(1),)})
    arrival = conv.send(again, at=T0 + timedelta(seconds=1))
    assert outcomes(arrival) == [DispatchOutcome.QUEUED]
    assert runs(arrival) == [] and [e for e in arrival.outputs if e.topic.name == "STEERING"] == []
    done = conv.send(completed(run.run_id, run.agent_id, run.version_id), at=T0 + timedelta(seconds=2))
    (follow_up,) = runs(done)
    assert follow_up.agent_id == agent_id(2)
    assert follow_up.messages == (first.message,)


def test_when_every_agent_is_excluded_the_dispatcher_records_no_match() -> None:
    conv = Conv(index_of(snapshot(1)))
    (run,) = runs(conv.send(dispatch()))
    again = excluding(1)
    assert outcomes(conv.send(again, at=T0 + timedelta(seconds=1))) == [DispatchOutcome.NO_MATCH]
    done = conv.send(completed(run.run_id, run.agent_id, run.version_id), at=T0 + timedelta(seconds=2))
    assert runs(done) == []


def test_a_refusal_while_our_interrupt_was_on_its_way_sends_its_message_to_the_next_agent_only() -> None:
    """The customer's second message asked the run to stop; the run had already refused the first
    on classification and re-dispatched it without its agent. That abort is not our interrupt:
    putting the first message back in front would have the refusing agent answer it after all,
    and the next agent too (two replies)."""
    conv = Conv(index_of(snapshot(1, priority=10, policy=ConcurrencyPolicy.INTERRUPT), snapshot(2)))
    first = dispatch("quero pagar o boleto")
    (run,) = runs(conv.send(first))
    assert outcomes(conv.send(dispatch("e o código de barras?"), at=T0 + timedelta(seconds=1))) == [
        DispatchOutcome.INTERRUPTED
    ]
    again = first.model_copy(update={"event_id": uuid.uuid4(), "excluded_agent_ids": (agent_id(1),)})
    conv.send(again, at=T0 + timedelta(seconds=1.5))
    refused = completed(run.run_id, run.agent_id, run.version_id, status=RunStatus.ABORTED).model_copy(
        update={"abort_reason": "classification_mismatch"}
    )
    answers: list[tuple[uuid.UUID, str]] = []
    done = conv.send(refused, at=T0 + timedelta(seconds=2))
    for step in range(2, 6):
        started = runs(done)
        if not started:
            break
        (next_run,) = started
        answers += [(next_run.agent_id, m.text) for m in next_run.messages]
        done = conv.send(
            completed(next_run.run_id, next_run.agent_id, next_run.version_id), at=T0 + timedelta(seconds=step + 1)
        )
    assert answers == [(agent_id(1), "e o código de barras?"), (agent_id(2), "quero pagar o boleto")], (
        "the refused message goes to the next agent only; the second message stays with the first agent"
    )
