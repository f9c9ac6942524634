"""The internal MCP tool server on its own: run tokens, tool grants, tenant scoping; the runner's
toolbox retrying what is safe to retry when the transport fails."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from sqlalchemy import func, update
from sqlalchemy.orm import Session

from services.api.mcp.server import McpToolServer
from services.api.mcp.tools import CrmTools
from services.cli import build_parser
from services.runner.providers.base import ToolCallRequest
from services.runner.tools import McpToolBox, ToolCatalog, ToolServerUnavailable
from services.runner.tools.mcp import TRANSPORT_ATTEMPTS
from switchboard.db.models import AiAgentRun, ChannelSession
from switchboard.db.session import create_async_engine, create_async_sessionmaker, tenant_transaction
from switchboard.run_tokens import RunTokenSettings, verify_run_token
from switchboard.settings import DatabaseSettings
from switchboard.tool_catalog import (
    CANCEL_FOLLOWUP,
    CONVERSATION_HISTORY,
    INSIGHTS_PUBLISH,
    LIST_FOLLOWUPS,
    MEMORY_SAVE_FACT,
    SCHEDULE_FOLLOWUP,
    SEARCH_CONTACTS,
    SEND_WHATSAPP_MESSAGE,
    TOOL_KINDS,
)
from tests.integration.runner.harness import Agent, RunnerHarness, create_agent, inbound, run_token
from tests.support.fake_llm import ServedApp

pytestmark = pytest.mark.integration


@asynccontextmanager
async def mcp(rh: RunnerHarness, token: str, *, url: str | None = None) -> AsyncIterator[Client]:
    assert rh.mcp is not None
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
    async with Client(streamable_http_client(url or f"{rh.mcp.url}/mcp", http_client=http)) as client:
        yield client


async def test_the_api_process_serves_the_tool_server_at_internal_mcp(
    rh: RunnerHarness, api: httpx.AsyncClient
) -> None:
    api_url = str(api.base_url).rstrip("/")
    agent = create_agent(rh.db, contact_name="Mounted Mara")
    async with mcp(rh, run_token(agent, {SEARCH_CONTACTS}), url=f"{api_url}/internal/mcp") as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        result = await client.call_tool(SEARCH_CONTACTS, {"query": "Mounted Mara"})
    assert listed == set(TOOL_KINDS)
    assert [c["name"] for c in json.loads(result.content[0].text)["contacts"]] == ["Mounted Mara"]  # type: ignore[union-attr]
    refused = await api.post("/internal/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    schema = (await api.get("/openapi.json")).json()
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "run_token_missing"
    # Internal: not part of the public API description.
    assert not [path for path in schema["paths"] if path.startswith("/internal")]


async def test_every_catalog_tool_is_served(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db)
    async with mcp(rh, run_token(agent, set())) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
    assert listed == set(TOOL_KINDS)


@pytest.mark.parametrize("header", [None, "Bearer nope", "Bearer forged"])
async def test_requests_without_a_valid_run_token_are_refused(rh: RunnerHarness, header: str | None) -> None:
    assert rh.mcp is not None
    if header == "Bearer forged":
        header = f"Bearer {run_token(create_agent(rh.db), {SEARCH_CONTACTS}, secret=b'not-the-secret')}"
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{rh.mcp.url}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Authorization": header} if header else {},
        )
    assert response.status_code == 401
    assert response.json()["error"]["code"].startswith("run_token_")


async def test_a_tool_not_granted_to_the_run_is_an_error_result(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db)
    async with mcp(rh, run_token(agent, {CONVERSATION_HISTORY})) as client:
        result = await client.call_tool(SEARCH_CONTACTS, {"query": "Ana"})
    assert result.is_error and "not granted" in result.content[0].text  # type: ignore[union-attr]


async def test_tools_only_see_the_tokens_org(rh: RunnerHarness) -> None:
    mine = create_agent(rh.db, contact_name="Zuleica Mine")
    create_agent(rh.db, contact_name="Zuleica Other")
    async with mcp(rh, run_token(mine, {SEARCH_CONTACTS})) as client:
        result = await client.call_tool(SEARCH_CONTACTS, {"query": "Zuleica"})
    names = [c["name"] for c in json.loads(result.content[0].text)["contacts"]]  # type: ignore[union-attr]
    assert names == ["Zuleica Mine"]


async def test_history_pages_back_through_older_messages(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db)
    for i in range(5):
        inbound(rh.db, agent, f"m{i}")
    async with mcp(rh, run_token(agent, {CONVERSATION_HISTORY})) as client:
        first = json.loads((await client.call_tool(CONVERSATION_HISTORY, {"limit": 2})).content[0].text)  # type: ignore[union-attr]
        older = json.loads(
            (await client.call_tool(CONVERSATION_HISTORY, {"limit": 2, "before": first["next_before"]})).content[0].text  # type: ignore[union-attr]
        )
    assert [m["text"] for m in first["messages"]] == ["m3", "m4"]
    assert [m["text"] for m in older["messages"]] == ["m1", "m2"]


async def test_follow_ups_schedule_list_cancel(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db)
    tools = {SCHEDULE_FOLLOWUP, LIST_FOLLOWUPS, CANCEL_FOLLOWUP}
    async with mcp(rh, run_token(agent, tools, rh=rh)) as client:
        scheduled = json.loads(
            (await client.call_tool(SCHEDULE_FOLLOWUP, {"reason": "retorno", "due_in_minutes": 60})).content[0].text  # type: ignore[union-attr]
        )
        listed = json.loads((await client.call_tool(LIST_FOLLOWUPS, {})).content[0].text)  # type: ignore[union-attr]
        cancelled = await client.call_tool(CANCEL_FOLLOWUP, {"followup_id": scheduled["followup_id"]})
        again = await client.call_tool(CANCEL_FOLLOWUP, {"followup_id": scheduled["followup_id"]})
    assert [f["followup_id"] for f in listed["followups"]] == [scheduled["followup_id"]]
    assert not cancelled.is_error and again.is_error


async def test_standalone_switchboard_mcp_serves_the_same_path(rh: RunnerHarness) -> None:
    assert build_parser().parse_args(["mcp"]).command == "mcp"
    server = McpToolServer(database=DatabaseSettings(url=rh.database_url), secret=RunTokenSettings().secret())
    served = await ServedApp(server.standalone_app()).start()
    try:
        agent = create_agent(rh.db)
        async with mcp(rh, run_token(agent, set()), url=f"{served.url}/internal/mcp") as client:
            assert {t.name for t in (await client.list_tools()).tools} == set(TOOL_KINDS)
        async with httpx.AsyncClient() as http:
            assert (await http.post(f"{served.url}/internal/mcp", json={})).status_code == 401
    finally:
        await served.stop()


class FailsRequests:
    """The tool server behind a gateway that answers 502, without passing them on, to the first
    ``failures`` JSON-RPC requests whose method starts with ``method`` (``""``: any request, the
    connection's handshake included)."""

    def __init__(self, app: Any, *, method: str, failures: int) -> None:
        self._app = app
        self._needle = f'"method":"{method}'.encode()
        self._failures = failures
        self.seen = 0  # requests of ``method`` that reached the gateway
        self.refused = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self._app(scope, receive, send)
            return
        messages = [await receive()]
        while messages[-1].get("more_body"):
            messages.append(await receive())
        if self._needle in b"".join(m.get("body", b"") for m in messages).replace(b" ", b""):
            self.seen += 1
            if self._failures > 0:
                self._failures -= 1
                self.refused += 1
                headers = [(b"content-type", b"text/plain")]
                await send({"type": "http.response.start", "status": 502, "headers": headers})
                await send({"type": "http.response.body", "body": b"bad gateway"})
                return

        async def replay() -> Any:
            return messages.pop(0) if messages else await receive()

        await self._app(scope, replay, send)


@asynccontextmanager
async def behind_gateway(rh: RunnerHarness, *, method: str, failures: int) -> AsyncIterator[tuple[str, FailsRequests]]:
    server = McpToolServer(database=DatabaseSettings(url=rh.database_url), secret=RunTokenSettings().secret())
    gateway = FailsRequests(server.app, method=method, failures=failures)
    served = await ServedApp(gateway).start()
    try:
        yield f"{served.url}/mcp", gateway
    finally:
        await served.stop()
        await server.dispose()


def _toolbox(url: str, agent: Agent, granted: set[str], rh: RunnerHarness) -> McpToolBox:
    token = run_token(agent, granted, rh=rh)
    return McpToolBox(url=url, token=token, granted=tuple(granted), catalog=ToolCatalog(), timeout_s=5)


def _request(name: str, arguments: dict[str, Any]) -> ToolCallRequest:
    return ToolCallRequest(id="call-1", name=name, arguments=arguments, arguments_json=json.dumps(arguments))


@pytest.mark.parametrize("method", ["", "tools/call"], ids=["connecting", "calling"])
async def test_a_dropped_connection_or_read_is_retried_instead_of_handing_off(rh: RunnerHarness, method: str) -> None:
    agent = create_agent(rh.db, contact_name="Ana Retry")
    async with behind_gateway(rh, method=method, failures=TRANSPORT_ATTEMPTS - 1) as (url, gateway):
        box = _toolbox(url, agent, {SEARCH_CONTACTS}, rh)
        try:
            outcome = await box.call(_request(SEARCH_CONTACTS, {"query": "Ana Retry"}), timeout_s=5)
        finally:
            await box.aclose()
    assert gateway.refused == TRANSPORT_ATTEMPTS - 1
    if method == "tools/call":
        assert gateway.seen == TRANSPORT_ATTEMPTS, "the read was asked again after each refusal"
    assert not outcome.is_error
    assert [c["name"] for c in json.loads(outcome.content)["contacts"]] == ["Ana Retry"]


async def test_a_read_the_gateway_keeps_refusing_ends_as_tool_server_unavailable(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db)
    async with behind_gateway(rh, method="tools/call", failures=TRANSPORT_ATTEMPTS) as (url, gateway):
        box = _toolbox(url, agent, {SEARCH_CONTACTS}, rh)
        try:
            with pytest.raises(ToolServerUnavailable):
                await box.call(_request(SEARCH_CONTACTS, {"query": "Ana"}), timeout_s=5)
        finally:
            await box.aclose()
    assert gateway.seen == TRANSPORT_ATTEMPTS


async def test_a_write_whose_call_failed_in_transport_is_never_sent_twice(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db)
    async with behind_gateway(rh, method="tools/call", failures=1) as (url, gateway):
        box = _toolbox(url, agent, {SCHEDULE_FOLLOWUP}, rh)
        try:
            with pytest.raises(ToolServerUnavailable):
                await box.call(_request(SCHEDULE_FOLLOWUP, {"due_in_minutes": 60, "reason": "retorno"}), timeout_s=5)
        finally:
            await box.aclose()
    assert gateway.seen == 1, "the write may have acted: it is not asked again"


async def test_a_run_closed_meanwhile_writes_nothing(rh: RunnerHarness) -> None:
    """A superseded or lost run whose runner does not know yet (a call on its way, a process that
    lost its lease) must not send, schedule, remember or publish: the attempt that took over does it
    once — and a token that outlives its run (an hour at least) writes nothing either."""
    agent = create_agent(rh.db)
    writes = {SEND_WHATSAPP_MESSAGE, SCHEDULE_FOLLOWUP, MEMORY_SAVE_FACT, INSIGHTS_PUBLISH}
    token = run_token(agent, {*writes, CONVERSATION_HISTORY}, rh=rh)
    run_id = verify_run_token(RunTokenSettings().secret(), token).run_id
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        session.execute(update(AiAgentRun).where(AiAgentRun.id == run_id).values(status="failed"))
    insight = {"key": "late_orders", "area": "sales", "title": "Pedidos atrasados"}
    async with mcp(rh, token) as client:
        refused = [
            await client.call_tool(SEND_WHATSAPP_MESSAGE, {"text": "Seu pedido saiu"}),
            await client.call_tool(SCHEDULE_FOLLOWUP, {"reason": "retorno", "due_in_minutes": 60}),
            await client.call_tool(MEMORY_SAVE_FACT, {"fact": "Prefere entrega à tarde", "scope": "org"}),
            await client.call_tool(INSIGHTS_PUBLISH, {"items": [insight]}),
        ]
        read = await client.call_tool(CONVERSATION_HISTORY, {})
    for result in refused:
        assert result.is_error and "has ended" in result.content[0].text  # type: ignore[union-attr]
    assert not read.is_error, "reading stays allowed"
    written = rh.scalar(
        agent.org_id,
        "SELECT (SELECT count(*) FROM messages WHERE run_id = :r) + (SELECT count(*) FROM scheduled_followups"
        " WHERE created_by_run_id = :r) + (SELECT count(*) FROM memory_facts WHERE source_run_id = :r)"
        " + (SELECT count(*) FROM workspace_insights WHERE run_id = :r)",
        r=run_id,
    )
    assert written == 0


async def test_what_an_approval_writes_says_so_and_a_runs_own_writes_do_not(rh: RunnerHarness) -> None:
    """Both carry the proposing run's id; a recovery attempt withdraws a lost run's own queued
    messages and follow-ups (services/runner/superseded.py), never an owner's approved ones."""
    agent = create_agent(rh.db)
    token = run_token(agent, {SEND_WHATSAPP_MESSAGE, SCHEDULE_FOLLOWUP}, rh=rh)
    claims = verify_run_token(RunTokenSettings().secret(), token)
    async with mcp(rh, token) as client:  # the run's own calls
        await client.call_tool(SEND_WHATSAPP_MESSAGE, {"text": "Seu pedido saiu"})
        await client.call_tool(SCHEDULE_FOLLOWUP, {"reason": "retorno", "due_in_minutes": 60})
    engine = create_async_engine(rh.db.url.render_as_string(hide_password=False), pool_size=1)
    try:  # the owner's approval, after the run ended (services/api/autonomy/executor.py)
        with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
            session.execute(update(AiAgentRun).where(AiAgentRun.id == claims.run_id).values(status="completed"))
        approved = replace(claims, approved=True)
        tools = CrmTools(sessions=create_async_sessionmaker(engine))
        await tools.send_whatsapp_message(approved, text="Cupom de 10%")
        await tools.schedule_followup(approved, reason="confirmar cupom", due_in_minutes=30)
    finally:
        await engine.dispose()
    messages = rh.scalar(
        agent.org_id,
        "SELECT json_object_agg(body, attributes ? 'approved') FROM messages WHERE run_id = :r",
        r=claims.run_id,
    )
    followups = rh.scalar(
        agent.org_id,
        "SELECT json_object_agg(reason, approved) FROM scheduled_followups WHERE created_by_run_id = :r",
        r=claims.run_id,
    )
    assert messages == {"Seu pedido saiu": False, "Cupom de 10%": True}
    assert followups == {"retorno": False, "confirmar cupom": True}


async def test_nothing_is_sent_or_scheduled_for_a_conversation_whose_number_was_archived(rh: RunnerHarness) -> None:
    """It could never go out: the notifier refuses an archived number (its name may be another's now)."""
    agent = create_agent(rh.db)
    token = run_token(agent, {SEND_WHATSAPP_MESSAGE, SCHEDULE_FOLLOWUP}, rh=rh)
    with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
        session.execute(
            update(ChannelSession).where(ChannelSession.id == agent.channel_session_id).values(archived_at=func.now())
        )
    async with mcp(rh, token) as client:
        sent = await client.call_tool(SEND_WHATSAPP_MESSAGE, {"text": "Seu pedido saiu"})
        scheduled = await client.call_tool(SCHEDULE_FOLLOWUP, {"reason": "retorno", "due_in_minutes": 60})
    for refused in (sent, scheduled):
        assert refused.is_error and "archived" in refused.content[0].text  # type: ignore[union-attr]
