"""Which runs leave a customer waiting: the notifier's rule, kept in step with the runner's codes."""

from __future__ import annotations

from services.notifier import unanswered
from services.runner import outcome


def test_the_abort_reasons_answered_elsewhere_are_the_runners() -> None:
    runners = {outcome.INTERRUPTED, outcome.ALREADY_ANSWERED, outcome.CLASSIFICATION_MISMATCH}
    assert runners == unanswered.ANSWERED_ELSEWHERE


def test_the_hand_back_codes_are_the_ones_the_runner_writes() -> None:
    runners = {outcome.RUNNER_SHUTDOWN, outcome.SUPERSEDED}
    assert runners == unanswered.HANDED_BACK_CODES
