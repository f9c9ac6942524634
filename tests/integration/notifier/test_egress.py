"""Tenant-set URLs cannot make the notifier call forbidden addresses (switchboard.egress)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import update

from scripts.channel_server import ChannelServer
from services.notifier.settings import NotifierSettings
from switchboard.contracts import Record, Topics, TopicSpec
from switchboard.crypto import KeyRing
from switchboard.db.models import ChannelSession
from switchboard.settings import EgressSettings
from tests.integration.notifier.conftest import RunningNotifier, World, eventually
from tests.support.agents import tenant_session

pytestmark = pytest.mark.integration

Publish = Callable[[TopicSpec[Any], Record], Awaitable[None]]
Start = Callable[..., Awaitable[RunningNotifier]]


def _outcome(world: World, run_id: Any) -> list[tuple[str, str | None, int]]:
    return [(d.status, d.error_code, d.attempts) for d in world.deliveries(run_id)]


async def test_a_session_pointing_at_the_metadata_service_is_refused_not_retried(
    world: World, channel: ChannelServer, publish: Publish, start_notifier: Start
) -> None:
    """A base_url saved before the API refused it (or a host name resolving there): nothing is sent to
    169.254.169.254, the delivery fails once with a stable code, and the next run is unaffected."""
    with tenant_session(world.org) as session:
        session.execute(
            update(ChannelSession)
            .where(ChannelSession.id == world.channel_id)
            .values(base_url="http://169.254.169.254")
        )
    refused = world.run()
    await start_notifier()
    await publish(Topics.RUN_COMPLETED, refused)
    outcome = await eventually(lambda: _outcome(world, refused.run_id), lambda o: o and o[0][0] != "sending")
    assert outcome == [("failed", "egress_refused", 1)]
    assert channel.received == []


async def test_deny_private_refuses_private_hosts_unless_their_network_is_allowed(
    world: World, channel: ChannelServer, publish: Publish, notifier_settings: NotifierSettings, keyring: KeyRing
) -> None:
    """The multi-tenant setting: the session's WAHA on 127.0.0.1 is refused, until its network is listed."""
    strict = notifier_settings.model_copy(update={"egress": EgressSettings(deny_private=True)})
    first = await RunningNotifier(strict, keyring).wait_ready()
    refused = world.run(text="not sent")
    await publish(Topics.RUN_COMPLETED, refused)
    await eventually(lambda: _outcome(world, refused.run_id), lambda o: o == [("failed", "egress_refused", 1)])
    await first.crash()

    listed = EgressSettings(deny_private=True, allowed_cidrs="10.0.0.0/8, 127.0.0.0/8")
    second = await RunningNotifier(notifier_settings.model_copy(update={"egress": listed}), keyring).wait_ready()
    try:
        allowed = world.run(text="sent")
        await publish(Topics.RUN_COMPLETED, allowed)
        await eventually(lambda: _outcome(world, allowed.run_id), lambda o: o == [("sent", None, 1)])
    finally:
        await second.crash()
    assert [s.text for s in channel.received] == ["sent"]
