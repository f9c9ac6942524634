"""The demo org, made through the product's own doors: the ``switchboard`` CLI and the REST API.

``switchboard admin bootstrap`` creates the org, its admin and an MFA-verified admin
token (the operator path; see services/api/identity/service.py). Everything else goes
through the API with that token: the channel session (pointed at the local channel
server), its ``working`` status through a *signed* ``session.status`` webhook — exactly
what WAHA would send — and two published agents of different priority.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from scripts.channel_server import ORG_HOOK_PATH, signed_headers
from scripts.demo.processes import REPO_ROOT

WEBHOOK_PATH = "/api/v1/webhooks/waha"
# Real providers, first one whose key is in the environment wins; else the labeled demo model.
PROVIDER_KEYS = (("anthropic", "ANTHROPIC_API_KEY"), ("openai", "OPENAI_API_KEY"), ("google", "GOOGLE_API_KEY"))
# Any OpenAI-compatible server (Ollama, vLLM, LM Studio, a proxy) instead: its API root, in the
# OpenAI SDK's own variable, and the name of a model it serves. It wins over the keys above.
LOCAL_SERVER_URL = "OPENAI_BASE_URL"
LOCAL_SERVER_MODEL = "DEMO_MODEL"
LOCAL_SERVER_LABEL = "Local OpenAI-compatible server"
# Such servers mostly ignore the key; the credential still needs one (8+ printable characters).
LOCAL_SERVER_PLACEHOLDER_KEY = "local-server"

GENERAL_AGENT = "Atendimento geral"
BUDGET_AGENT = "Pedidos (budget-limited)"
# The budget-limited agent answers only messages about an order status, and may take one step:
# its first step is a tool call (its prompt asks for one; the demo model's rules make one), so the
# step that would answer is refused before any model call: aborted, ``max_steps_reached``.
BUDGET_TRIGGER_REGEX = r"status do (meu )?pedido|order status"
BUDGET_PROMPT = (
    "Você cuida do status de pedidos. Sempre chame crm_get_conversation_history antes de responder, "
    "para achar o número do pedido."
)


class DemoError(RuntimeError):
    """A bootstrap or scenario step failed in a way that makes the rest meaningless."""


@dataclass(frozen=True)
class ModelChoice:
    provider: str
    model: str
    is_llm: bool
    # The org's credential the versions name (a local server's); None: the platform key, or none.
    credential_id: str | None = None


@dataclass(frozen=True)
class Agent:
    id: str
    version_id: str
    name: str
    priority: int


@dataclass
class DemoOrg:
    org_id: str
    user_id: str
    token: str
    channel_session_id: str
    session_name: str
    webhook_secret: str
    model: ModelChoice
    agents: dict[str, Agent]
    # The org webhook's signing secret, when it points at the channel server's owner inbox.
    owner_webhook_secret: str | None = None

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


def platform_key_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The runner's platform key for the provider the demo will use (nothing for the demo model,
    nor for a local server: its key is the org's credential)."""
    if environ.get(LOCAL_SERVER_URL):
        return {}
    for provider, var in PROVIDER_KEYS:
        if environ.get(var):
            return {f"RUNNER_{provider.upper()}_API_KEY": environ[var]}
    return {}


async def choose_model(client: httpx.AsyncClient, token: str, environ: Mapping[str, str] = os.environ) -> ModelChoice:
    """A local OpenAI-compatible server when ``OPENAI_BASE_URL`` is set; else a real provider's default
    model when its key is set; else the built-in demo model."""
    if environ.get(LOCAL_SERVER_URL):
        return await local_server_model(client, token, environ)
    for provider, var in PROVIDER_KEYS:
        if environ.get(var):
            response = await client.get("/api/v1/providers", headers={"Authorization": f"Bearer {token}"})
            _check(response, "list providers")
            for row in response.json()["data"]:
                if row["provider"] == provider and row["default_model"]:
                    return ModelChoice(provider, row["default_model"], is_llm=True)
    return ModelChoice("demo", "demo", is_llm=False)


async def local_server_model(client: httpx.AsyncClient, token: str, environ: Mapping[str, str]) -> ModelChoice:
    """Store the server as the org's default OpenAI credential (``base_url``) and use ``DEMO_MODEL`` on it:
    the product's own way to run an agent on a local model (docs/api.md, "base_url")."""
    model = environ.get(LOCAL_SERVER_MODEL, "").strip()
    if not model:
        raise DemoError(
            f"{LOCAL_SERVER_URL} is set: set {LOCAL_SERVER_MODEL} to a model that server serves (e.g. llama3.1)"
        )
    created = await client.post(
        "/api/v1/credentials",
        json={
            "provider": "openai",
            "label": LOCAL_SERVER_LABEL,
            "api_key": environ.get("OPENAI_API_KEY") or LOCAL_SERVER_PLACEHOLDER_KEY,
            "base_url": environ[LOCAL_SERVER_URL].strip().rstrip("/"),
            "is_default": True,
        },
        headers={"Authorization": f"Bearer {token}"},
    )
    _check(created, "store the local server's credential")
    return ModelChoice("openai", model, is_llm=True, credential_id=created.json()["data"]["id"])


def cli_bootstrap(env: Mapping[str, str], *, org_name: str, email: str) -> dict[str, str]:
    """``switchboard admin bootstrap``: {org_id, user_id, token} (the real CLI, as an operator runs it)."""
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", "admin", "bootstrap", "--org", org_name, "--email", email],
        cwd=REPO_ROOT,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise DemoError(f"switchboard admin bootstrap failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    result: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def sign(secret: str, body: bytes) -> dict[str, str]:
    """WAHA's webhook signature: hex HMAC-SHA512 of the raw body keyed by the session's secret."""
    return signed_headers(secret, body)


async def configure_channel_webhooks(client: httpx.AsyncClient, org: DemoOrg) -> None:
    """Connect the number as an owner does, through the API (``:connect``): it points the channel
    server's session at the session's own webhook URL, signed with its secret; the channel server
    then calls back with the echo of every text sent and its receipts."""
    response = await client.post(f"/api/v1/channel-sessions/{org.channel_session_id}:connect", headers=org.headers())
    _check(response, "connect the channel session (POST :connect)")


async def post_webhook(client: httpx.AsyncClient, org: DemoOrg, event: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A signed WAHA delivery to the real webhook endpoint; its ``data``."""
    envelope = {
        "id": f"evt_{uuid.uuid4().hex}",
        "timestamp": int(time.time() * 1000),
        "event": event,
        "session": org.session_name,
        "payload": payload,
    }
    body = json.dumps(envelope).encode()
    path = f"{WEBHOOK_PATH}/{org.channel_session_id}"  # the session's own URL, as WAHA is configured
    response = await client.post(path, content=body, headers=sign(org.webhook_secret, body))
    _check(response, f"webhook {event}")
    data: dict[str, Any] = response.json()["data"]
    return data


def _check(response: httpx.Response, what: str) -> None:
    if response.status_code >= 400:
        raise DemoError(f"{what}: HTTP {response.status_code} {response.text[:500]}")


def _version(model: ModelChoice, channel_id: str, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "system_prompt": (
            "Você é o assistente da Loja Demo. Responda em poucas palavras; use o histórico da conversa "
            "quando o cliente perguntar pelos pedidos dele. Quando o cliente pedir o catálogo, envie-o com "
            "crm_send_whatsapp_message."
        ),
        "provider": model.provider,
        "model": model.model,
        "credential_id": model.credential_id,
        # The send tool is a write: under the default ``propose`` autonomy a call becomes an action to approve.
        "tool_ids": ["crm_get_conversation_history", "crm_search_contacts", "crm_send_whatsapp_message"],
        "trigger_config": {"event_types": ["message"], "ignore_groups": True},
        "channel_session_id": channel_id,
        "max_steps": 4,
        "token_budget": 20_000,
        "cost_budget_cents": 5,
        "concurrency_policy": "enqueue",
    }
    body.update(overrides)
    return body


async def _publish_agent(
    client: httpx.AsyncClient, org: DemoOrg, name: str, priority: int, version: dict[str, Any]
) -> Agent:
    created = await client.post(
        "/api/v1/agents", json={"name": name, "priority": priority, "version": version}, headers=org.headers()
    )
    _check(created, f"create agent {name!r}")
    data = created.json()["data"]
    agent_id, version_id = data["agent"]["id"], data["version"]["id"]
    published = await client.post(
        f"/api/v1/agents/{agent_id}:publish", json={"version_id": version_id}, headers=org.headers()
    )
    _check(published, f"publish agent {name!r}")
    return Agent(agent_id, version_id, name, priority)


async def bootstrap(
    client: httpx.AsyncClient,
    env: Mapping[str, str],
    *,
    channel_url: str,
    channel_api_key: str,
    label: str = "Demo",
    environ: Mapping[str, str] = os.environ,
    channel_callbacks: bool = True,
    dispatcher_metrics_url: str | None = None,
    owner_webhook: bool = False,
) -> DemoOrg:
    """A fresh org with admin, token, a ``working`` channel session and two published agents.

    ``channel_callbacks``: the channel server calls our webhook back with echoes and receipts,
    as WAHA does for a session subscribed to ``message.any`` and ``message.ack``.
    ``owner_webhook``: the org webhook points at the channel server's owner inbox
    (``/hooks/org``), with the morning push off until the script asks for it.
    ``dispatcher_metrics_url``: return only once the dispatcher's published index holds the two
    agents (its ``switchboard_dispatcher_published_agents`` grew by two). A publication
    reaches the dispatcher through the outbox and Kafka; a message that arrives before it
    finds no agent (decided ``no_match``), which a script playing messages right away must not
    mistake for a failure of the scenario."""
    suffix = uuid.uuid4().hex[:8]
    made = cli_bootstrap(env, org_name=f"{label} {suffix}", email=f"admin-{suffix}@demo.switchboard.local")
    headers = {"Authorization": f"Bearer {made['token']}"}
    session_name = f"demo-{suffix}"
    channel = await client.post(
        "/api/v1/channel-sessions",
        json={
            "label": "Demo WhatsApp number",
            "external_session": session_name,
            "base_url": channel_url,
            "api_key": channel_api_key,
        },
        headers=headers,
    )
    _check(channel, "create channel session")
    channel_data = channel.json()["data"]
    org = DemoOrg(
        org_id=made["org_id"],
        user_id=made["user_id"],
        token=made["token"],
        channel_session_id=channel_data["id"],
        session_name=session_name,
        webhook_secret=channel_data["webhook_secret"],
        model=await choose_model(client, made["token"], environ),
        agents={},
    )
    if channel_callbacks:
        await configure_channel_webhooks(client, org)
    if owner_webhook:
        org.owner_webhook_secret = await connect_owner_inbox(client, org, channel_url)
    await post_webhook(client, org, "session.status", {"status": "WORKING"})
    current = await client.get(f"/api/v1/channel-sessions/{org.channel_session_id}", headers=headers)
    _check(current, "read channel session")
    if current.json()["data"]["status"] != "working":
        raise DemoError(f"channel session is {current.json()['data']['status']!r} after a signed WORKING webhook")
    known_before = await published_agents(client, dispatcher_metrics_url) if dispatcher_metrics_url else 0
    org.agents[GENERAL_AGENT] = await _publish_agent(
        client, org, GENERAL_AGENT, 10, _version(org.model, org.channel_session_id)
    )
    budget = _version(
        org.model,
        org.channel_session_id,
        system_prompt=BUDGET_PROMPT,
        max_steps=1,
        trigger_config={"event_types": ["message"], "ignore_groups": True, "keyword_regex": BUDGET_TRIGGER_REGEX},
    )
    org.agents[BUDGET_AGENT] = await _publish_agent(client, org, BUDGET_AGENT, 20, budget)
    if dispatcher_metrics_url:
        await _wait_for_index(client, dispatcher_metrics_url, known_before + len(org.agents))
    return org


async def connect_owner_inbox(client: httpx.AsyncClient, org: DemoOrg, channel_url: str) -> str:
    """The org webhook → the channel server's owner inbox; returns its signing secret. The
    morning push stays off (``digest_hour`` null) until the script turns it on."""
    # Off first: a new org's push is due from 08:00, and a pass between the two calls would
    # push today's digest before the script played anything.
    quiet = await client.patch("/api/v1/organization", json={"digest_hour": None}, headers=org.headers())
    _check(quiet, "turn the morning push off for now")
    webhook = await client.put("/api/v1/org-webhook", json={"url": channel_url + ORG_HOOK_PATH}, headers=org.headers())
    _check(webhook, "set the org webhook")
    return str(webhook.json()["data"]["secret"])


PUBLISHED_AGENTS_METRIC = "switchboard_dispatcher_published_agents"
INDEX_TIMEOUT_S = 60.0


async def published_agents(client: httpx.AsyncClient, metrics_url: str) -> int:
    """How many agents the dispatcher's published index holds, from its ``/metrics``."""
    answer = await client.get(metrics_url)
    _check(answer, "read the dispatcher's metrics")
    for line in answer.text.splitlines():
        name, _, value = line.partition(" ")
        if name == PUBLISHED_AGENTS_METRIC:
            return int(float(value))
    return 0


async def _wait_for_index(client: httpx.AsyncClient, metrics_url: str, expected: int) -> None:
    deadline = time.monotonic() + INDEX_TIMEOUT_S
    while (known := await published_agents(client, metrics_url)) < expected:
        if time.monotonic() > deadline:
            waited = f"{INDEX_TIMEOUT_S:.0f} s"
            raise DemoError(f"after {waited} the dispatcher knows {known} published agents, not {expected}")
        await asyncio.sleep(0.1)
