"""``make demo`` on a local OpenAI-compatible server (``OPENAI_BASE_URL`` + ``DEMO_MODEL``): the demo stores
the server as the org's OpenAI credential and its agents publish on a model the catalog does not know,
through the real API (the product's own ``base_url`` rule, docs/api.md)."""

from __future__ import annotations

import httpx
import pytest

from scripts.demo.bootstrap import (
    LOCAL_SERVER_LABEL,
    DemoError,
    DemoOrg,
    ModelChoice,
    _publish_agent,
    _version,
    choose_model,
    platform_key_env,
    post_webhook,
)
from tests.integration.api.test_webhook import connect_channel
from tests.support.api import OrgHandle

LOCAL = {"OPENAI_BASE_URL": "http://127.0.0.1:11434/v1/", "DEMO_MODEL": "llama3.1", "ANTHROPIC_API_KEY": "sk-ant-x"}


async def test_the_demo_agents_run_on_the_local_servers_model_with_its_credential(
    client: httpx.AsyncClient, org: OrgHandle
) -> None:
    token = org.token()
    choice = await choose_model(client, token, LOCAL)

    assert (choice.provider, choice.model, choice.is_llm) == ("openai", "llama3.1", True)
    assert choice.credential_id is not None
    stored = (await client.get(f"/api/v1/credentials/{choice.credential_id}", headers=org.headers())).json()["data"]
    assert (stored["label"], stored["base_url"], stored["is_default"]) == (
        LOCAL_SERVER_LABEL,
        "http://127.0.0.1:11434/v1",
        True,
    )
    assert platform_key_env(LOCAL) == {}, "the server's key is the org's credential, not a platform key"

    channel = await connect_channel(client, org)
    demo = DemoOrg(
        org_id=str(org.org_id),
        user_id=str(org.admin_user_id),
        token=token,
        channel_session_id=str(channel.id),
        session_name=channel.name,
        webhook_secret=channel.secret,
        model=choice,
        agents={},
    )
    await post_webhook(client, demo, "session.status", {"status": "WORKING"})  # publishing needs a working number
    agent = await _publish_agent(client, demo, "Local", 5, _version(choice, str(channel.id)))
    version = (await client.get(f"/api/v1/agents/{agent.id}/versions/{agent.version_id}", headers=org.headers())).json()
    assert version["data"]["model"] == "llama3.1"
    assert version["data"]["credential_id"] == choice.credential_id


async def test_a_local_server_without_a_model_name_is_a_clear_error(client: httpx.AsyncClient, org: OrgHandle) -> None:
    with pytest.raises(DemoError, match="DEMO_MODEL"):
        await choose_model(client, org.token(), {"OPENAI_BASE_URL": "http://127.0.0.1:11434/v1"})


async def test_without_a_local_server_nor_keys_the_demo_model_is_used(
    client: httpx.AsyncClient, org: OrgHandle
) -> None:
    assert await choose_model(client, org.token(), {}) == ModelChoice("demo", "demo", is_llm=False)
