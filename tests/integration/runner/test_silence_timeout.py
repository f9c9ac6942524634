"""The per-version silence timeout [002: 15 min default, 1-240]: set through the agents API, used by the runner."""

from __future__ import annotations

import httpx
import pytest

from tests.integration.runner.harness import RunnerHarness, create_agent, inbound, run_request
from tests.support import agents
from tests.support.api import create_org
from tests.support.fake_llm import Reply
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration


async def test_the_silence_timeout_is_a_version_setting_from_1_to_240_minutes(
    api: httpx.AsyncClient, stack: StackEndpoints
) -> None:
    org = create_org(stack.database_url)
    channel = agents.make_channel(org)
    created = await agents.create_agent(api, org, channel, silence_timeout_minutes=7)
    assert created["version"]["silence_timeout_minutes"] == 7
    agent_id = created["agent"]["id"]
    default = await agents.save_draft(api, org, agent_id, channel)
    assert default["silence_timeout_minutes"] == 15
    patched = await api.patch(
        f"/api/v1/agents/{agent_id}/versions/{default['id']}",
        json={"silence_timeout_minutes": 240},
        headers=org.headers(),
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["data"]["silence_timeout_minutes"] == 240
    for bad in (0, 241):
        refused = await api.post(
            f"/api/v1/agents/{agent_id}/versions",
            json=agents.version_body(channel, silence_timeout_minutes=bad),
            headers=org.headers(),
        )
        assert refused.status_code == 422, refused.text


async def test_the_runner_applies_the_versions_silence_timeout(rh: RunnerHarness) -> None:
    # The process default is 15 minutes (RUNNER_SILENCE_TIMEOUT_S); the version says 7.
    agent = create_agent(rh.db, provider="anthropic", model="claude-haiku-4-5", silence_timeout_minutes=7)
    rh.fake.script([Reply(text="ok")])
    request = run_request(agent, [inbound(rh.db, agent, "Oi")])
    assert (await rh.run(request)).status == "completed"
    debug = [e.debug for e in await rh.events(request.run_id) if e.debug is not None]
    started = next(d for d in debug if d.name == "run_started")
    assert "silence timeout 420s" in started.detail
