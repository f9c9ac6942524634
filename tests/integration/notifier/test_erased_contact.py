"""A run that answered before its contact was erased, delivered after (docs/api.md "Erasing a
contact"): the notifier neither stores the reply — its text would be personal data again —
nor sends it, nor anything the run's send tool queued."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from scripts.channel_server import ChannelServer
from switchboard.contracts import Record, Topics, TopicSpec
from switchboard.db.models import Contact
from tests.integration.notifier.conftest import RunningNotifier, World, eventually
from tests.support.agents import tenant_session

pytestmark = pytest.mark.integration

Publish = Callable[[TopicSpec[Any], Record], Awaitable[None]]
Start = Callable[..., Awaitable[RunningNotifier]]


async def test_a_reply_delivered_after_the_erasure_is_neither_stored_nor_sent(
    world: World, channel: ChannelServer, publish: Publish, start_notifier: Start
) -> None:
    late = world.run(text="Olá Ana, seu pedido chegou.")
    queued = world.queue_intent(late, "Ana, segue o catálogo")
    with tenant_session(world.org) as session:
        session.get_one(Contact, world.contact_id).erased_at = datetime.now(UTC)
    await start_notifier()
    await publish(Topics.RUN_COMPLETED, late)
    await eventually(lambda: [m.delivery_status for m in world.outbound(late.run_id)], lambda s: s == ["failed"])
    [intent] = world.outbound(late.run_id)
    assert (intent.id, intent.delivery_error) == (queued, "contact_erased")
    assert not any(m.body == late.final_text for m in world.outbound(late.run_id)), "the reply was not stored"

    assert channel.received == [], "nothing reached the customer"
