"""Wake reasons (issue 6 item 3): which context ids each reason needs, and the wake layer per reason. Pure."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from services.api.conversations.wake import REQUIRED_IDS
from services.runner.context import compose, default_builders
from switchboard.contracts import WakeContext, WakeReason
from tests.unit.runner.test_context import subject


def test_every_non_message_reason_names_the_ids_it_needs() -> None:
    assert set(REQUIRED_IDS) == set(WakeReason) - {WakeReason.USER_MESSAGE}
    for names in REQUIRED_IDS.values():
        assert names and all(name in WakeContext.model_fields for name in names)


@pytest.mark.parametrize("reason", [r for r in WakeReason if r is not WakeReason.USER_MESSAGE])
async def test_the_wake_layer_names_the_reason_and_its_ids(reason: WakeReason) -> None:
    run = subject()
    ids = {name: uuid.uuid4() for name in REQUIRED_IDS[reason]}
    request = run.request.model_copy(update={"wake_reason": reason, "wake_context": WakeContext(**ids), "messages": ()})
    draft = await compose(dataclasses.replace(run, request=request), [], default_builders())
    text = {layer.label: layer.text for layer in draft.system}["Wake context"]
    assert f"Wake reason: {reason.value}." in text
    assert all(f"{name}={value}" in text for name, value in ids.items())
    # No customer text: the transcript says why the agent is awake instead of inventing a message.
    assert draft.messages[-1].text == f"(No new customer message: you were woken for {reason.value}.)"  # type: ignore[union-attr]
