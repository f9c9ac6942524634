"""The scripted customer messages, played through the real signed WAHA webhook, and what must follow.

(The owner's side — proposals, approval, ``/todo``, the Home digest — is scripts/demo/owner.py.)

Each scenario sends its messages, waits (polling with a deadline) for the runs that
answer them (``GET /api/v1/runs``) and for what the channel server received, prints
it, and records its expectations in the :class:`Report`. It also returns what it saw
(:class:`ScenarioResult`) so the end-to-end tests assert on the same data.

Absence ("no reply to a handoff") can only be shown by waiting: after the run is
terminal (and, for a handoff, after the conversation was assigned) the channel server
is watched for ``settle_s`` more.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from scripts.demo.bootstrap import BUDGET_AGENT, GENERAL_AGENT, DemoOrg, post_webhook
from scripts.demo.report import Report
from switchboard.tool_catalog import is_known_tool

TERMINAL = frozenset({"completed", "failed", "aborted", "handoff"})
HISTORY_TOOL = "crm_get_conversation_history"
BUDGET_REASONS = frozenset({"max_steps_reached", "token_budget_exceeded", "cost_budget_exceeded"})


@dataclass
class Stage:
    """Everything a scenario talks to."""

    api: httpx.AsyncClient
    channel: httpx.AsyncClient | None  # None: no channel server to read from
    org: DemoOrg
    report: Report
    database_url: str
    timeout_s: float = 45.0
    settle_s: float = 2.0
    _details: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class ScenarioResult:
    name: str
    chat_id: str
    message_ids: list[str]
    runs: list[dict[str, Any]]
    replies: list[dict[str, Any]]
    conversation: dict[str, Any] | None = None
    details: dict[str, Any] = field(default_factory=dict)  # what else a step observed (decisions, to-do items…)


def tool_call_names(run: dict[str, Any] | None) -> list[str]:
    """The catalog tools a run called, in order (the trace also holds guard entries such as ``budget_stop``)."""
    return [str(s["tool_name"]) for s in (run or {}).get("trace") or [] if is_known_tool(str(s.get("tool_name")))]


def _instant(value: str | None) -> datetime:
    return datetime.fromisoformat(value) if value else datetime.max.replace(tzinfo=UTC)


def new_chat_id() -> str:
    """A WhatsApp one-to-one chat id nobody else in this org uses."""
    return f"5511{random.randrange(10**8, 10**9)}@c.us"


async def send(stage: Stage, chat_id: str, text: str) -> str:
    """One customer message through the signed webhook; the stored message id."""
    stage.report.customer(chat_id, text)
    data = await post_webhook(
        stage.api,
        stage.org,
        "message",
        {"id": f"wamid.{uuid.uuid4().hex}", "timestamp": time.time(), "from": chat_id, "fromMe": False, "body": text},
    )
    if not data.get("dispatched"):
        stage.report.step(f"not dispatched: {data.get('reason')}")
    return str(data["message_id"])


async def _run_detail(stage: Stage, run_id: str) -> dict[str, Any]:
    cached = stage._details.get(run_id)
    if cached is not None:
        return cached
    response = await stage.api.get(f"/api/v1/runs/{run_id}", headers=stage.org.headers())
    response.raise_for_status()
    detail: dict[str, Any] = response.json()["data"]
    if detail["status"] in TERMINAL:
        stage._details[run_id] = detail
    return detail


async def wait_runs(stage: Stage, message_ids: list[str], timeout_s: float | None = None) -> list[dict[str, Any]]:
    """The terminal live runs that answered any of ``message_ids``, oldest first, once all are answered
    (or what there is at the deadline)."""
    wanted = set(message_ids)
    deadline = time.monotonic() + (timeout_s or stage.timeout_s)
    found: dict[str, dict[str, Any]] = {}
    while True:
        response = await stage.api.get("/api/v1/runs", params={"limit": 200}, headers=stage.org.headers())
        response.raise_for_status()
        for summary in response.json()["data"]:
            if summary["status"] not in TERMINAL or summary["id"] in found or summary["is_dry_run"]:
                continue
            detail = await _run_detail(stage, summary["id"])
            if wanted & {str(m) for m in detail.get("inbound_message_ids") or []}:
                found[summary["id"]] = detail
        answered = {str(m) for run in found.values() for m in run.get("inbound_message_ids") or []}
        if wanted <= answered or time.monotonic() > deadline:
            return sorted(found.values(), key=lambda r: (r["created_at"], r["id"]))
        await asyncio.sleep(0.2)


def _received_rows(body: Any) -> list[dict[str, Any]]:
    """The channel server's ``GET /api/received`` as a list, whatever envelope it uses."""
    if isinstance(body, dict):
        body = body.get("received", body.get("data", []))
    return [row for row in body if isinstance(row, dict)] if isinstance(body, list) else []


def _chat(row: dict[str, Any]) -> str | None:
    value = row.get("chat_id", row.get("chatId"))
    return None if value is None else str(value)


async def received(stage: Stage, chat_id: str) -> list[dict[str, Any]]:
    """What the channel server received for ``chat_id`` (empty when there is no channel server)."""
    if stage.channel is None:
        return []
    response = await stage.channel.get("/api/received")
    response.raise_for_status()
    return [row for row in _received_rows(response.json()) if _chat(row) == chat_id and _delivered(row)]


def signed_by(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """What the owner's receiver checks: HMAC-SHA256 of "<X-Switchboard-Timestamp>.<body>"."""
    timestamp = headers.get("X-Switchboard-Timestamp", "")
    expected = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers.get("X-Switchboard-Signature", ""), f"sha256={expected}")


async def owner_events(stage: Stage, event_type: str) -> list[tuple[dict[str, Any], bool]]:
    """The org webhook's events of ``event_type`` the channel server's owner inbox received:
    (document, signed with the org webhook's secret)."""
    if stage.channel is None or stage.org.owner_webhook_secret is None:
        return []
    response = await stage.channel.get("/api/org-events")
    response.raise_for_status()
    found: list[tuple[dict[str, Any], bool]] = []
    for row in response.json():
        body = str(row.get("body", "")).encode()
        document = json.loads(body)
        if isinstance(document, dict) and document.get("type") == event_type:
            found.append((document, signed_by(stage.org.owner_webhook_secret, row.get("headers") or {}, body)))
    return found


async def wait_owner_events(stage: Stage, event_type: str, count: int = 1) -> list[tuple[dict[str, Any], bool]]:
    """Until ``count`` events of ``event_type`` arrived (or the deadline), then ``settle_s`` more for extras."""
    deadline = time.monotonic() + stage.timeout_s
    while len(await owner_events(stage, event_type)) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.3)
    await asyncio.sleep(stage.settle_s)
    return await owner_events(stage, event_type)


def _delivered(row: dict[str, Any]) -> bool:
    """A send the channel accepted (a refused attempt the notifier retried is not a reply)."""
    status = row.get("status_returned", 201)
    return isinstance(status, int) and 200 <= status < 300


async def wait_replies(stage: Stage, chat_id: str, count: int) -> list[dict[str, Any]]:
    """Wait until ``count`` replies reached ``chat_id`` (or the deadline), then ``settle_s`` more for extras."""
    deadline = time.monotonic() + stage.timeout_s
    rows = await received(stage, chat_id)
    while len(rows) < count and time.monotonic() < deadline and stage.channel is not None:
        await asyncio.sleep(0.2)
        rows = await received(stage, chat_id)
    await asyncio.sleep(stage.settle_s)
    rows = await received(stage, chat_id)
    for row in rows:
        stage.report.reply(chat_id, str(row.get("text")))
    return rows


def reply_expectations(stage: Stage, scenario: str, runs: list[dict[str, Any]], replies: list[dict[str, Any]]) -> None:
    """Each completed run's final text reached the customer exactly once, and nothing else did."""
    if stage.channel is None:
        stage.report.expect(scenario, "the customer received the replies", False, "no channel server running")
        return
    expected = [r["final_text"] for r in runs if r["status"] == "completed" and r.get("final_text")]
    texts = [str(row.get("text")) for row in replies]
    stage.report.expect(
        scenario,
        f"the customer received each reply exactly once ({len(expected)} expected)",
        sorted(texts) == sorted(expected),
        f"received {len(texts)}: {texts!r}; runs' final texts: {expected!r}",
    )


async def converse(stage: Stage, title: str, *texts: str) -> tuple[str, list[str], list[dict[str, Any]]]:
    """A new customer sends ``texts`` back to back: (chat id, message ids, the runs that answered, printed)."""
    stage.report.section(title)
    chat = new_chat_id()
    messages = [await send(stage, chat, text) for text in texts]
    runs = await wait_runs(stage, messages)
    for run in runs:
        stage.report.run(run)
    return chat, messages, runs


async def tool_question(stage: Stage) -> ScenarioResult:
    """A question the agent answers after a tool call (the history tool, for the demo model)."""
    name = "tool question"
    chat, messages, runs = await converse(
        stage,
        "1. a question answered with a tool call",
        "Olá! Do you have my order history? Quero rever minhas compras.",
    )
    replies = await wait_replies(stage, chat, 1)
    run = runs[0] if runs else None
    tools = tool_call_names(run)
    general = stage.org.agents[GENERAL_AGENT].id
    stage.report.expect(name, "one run answered the question", len(runs) == 1, f"{len(runs)} runs")
    stage.report.expect(
        name,
        f"the general agent answered (priority {stage.org.agents[GENERAL_AGENT].priority})",
        run is not None and run["agent_id"] == general,
    )
    stage.report.expect(
        name, "the run completed", run is not None and run["status"] == "completed", str((run or {}).get("status"))
    )
    stage.report.expect(
        name,
        "it called a tool" + ("" if stage.org.model.is_llm else f" ({HISTORY_TOOL})"),
        bool(tools) and (stage.org.model.is_llm or HISTORY_TOOL in tools),
        f"trace tools: {tools}",
    )
    reply_expectations(stage, name, runs, replies)
    return ScenarioResult(name, chat, messages, runs, replies)


async def burst(stage: Stage) -> ScenarioResult:
    """Three quick messages: the first starts a run, the other two wait and share one follow-up run."""
    name = "burst"
    chat, messages, runs = await converse(
        stage,
        "2. a burst of three quick messages in one conversation",
        "Oi!",
        "Vocês abrem sábado? Qual o horário?",
        "E quanto custa a entrega?",
    )
    replies = await wait_replies(stage, chat, len(runs))
    answered = [[str(m) for m in run.get("inbound_message_ids") or []] for run in runs]
    stage.report.expect(
        name,
        "answered by 2 runs (the first message's, then ONE follow-up for the other two), not 3",
        len(runs) == 2 and answered[0] == messages[:1] and sorted(answered[1]) == sorted(messages[1:]),
        f"runs answered {answered}",
    )
    overlap = any(
        _instant(a.get("completed_at")) > _instant(b.get("started_at") or b["created_at"])
        for a, b in itertools.pairwise(runs)
    )
    stage.report.expect(name, "the runs never overlapped", not overlap)
    stage.report.expect(name, "both runs completed", bool(runs) and all(r["status"] == "completed" for r in runs))
    reply_expectations(stage, name, runs, replies)
    return ScenarioResult(name, chat, messages, runs, replies)


async def conversation_state(stage: Stage, conversation_id: str) -> dict[str, Any] | None:
    """The conversation's status and assignee: from the API when it has the endpoint, else from the database."""
    response = await stage.api.get(f"/api/v1/conversations/{conversation_id}", headers=stage.org.headers())
    if response.status_code == 200:
        data: dict[str, Any] = response.json()["data"]
        return data
    return await asyncio.to_thread(_conversation_from_db, stage.database_url, stage.org.org_id, conversation_id)


def _conversation_from_db(database_url: str, org_id: str, conversation_id: str) -> dict[str, Any] | None:
    rows = db_rows(
        database_url,
        org_id,
        "SELECT status, assigned_user_id, handoff_at FROM conversations WHERE id = :id",
        {"id": conversation_id},
    )
    if not rows:
        return None
    row = rows[0]
    return {
        "status": row["status"],
        "assigned_user_id": None if row["assigned_user_id"] is None else str(row["assigned_user_id"]),
        "handoff_at": None if row["handoff_at"] is None else row["handoff_at"].isoformat(),
    }


def db_rows(database_url: str, org_id: str, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """A read the API has no endpoint for, in the org's tenant scope (row-level security); blocking."""
    from sqlalchemy import text
    from sqlalchemy.orm import Session

    from switchboard.db.session import create_engine, set_tenant

    engine = create_engine(database_url, pool_size=1)
    try:
        with Session(engine) as session, session.begin():
            set_tenant(session, org_id)
            return [dict(row._mapping) for row in session.execute(text(sql), params)]
    finally:
        engine.dispose()


async def handoff(stage: Stage) -> ScenarioResult:
    """ "falar com humano": the runner hands off before any model call; humans get the conversation, no reply."""
    name = "handoff"
    chat, messages, runs = await converse(
        stage, '3. "falar com humano" — handoff to a person', "Por favor, quero falar com humano."
    )
    run = runs[0] if runs else None
    conversation: dict[str, Any] | None = None
    if run is not None and run.get("conversation_id"):
        deadline = time.monotonic() + stage.timeout_s / 2
        conversation = await conversation_state(stage, str(run["conversation_id"]))
        while (conversation or {}).get("status") != "handoff" and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            conversation = await conversation_state(stage, str(run["conversation_id"]))
        stage.report.step(
            f"conversation status={conversation and conversation.get('status')}"
            f" handoff_at={conversation and conversation.get('handoff_at')}"
            f" assigned_user={conversation and conversation.get('assigned_user_id')} (none: the team's queue)"
        )
    replies = await wait_replies(stage, chat, 0)
    stage.report.expect(
        name,
        "the run ended in handoff without calling the model",
        run is not None and run["status"] == "handoff" and run.get("steps_count") == 0,
        f"{(run or {}).get('status')}, steps={(run or {}).get('steps_count')}",
    )
    stage.report.expect(
        name,
        "the conversation is handed to the humans (status handoff)",
        conversation is not None and conversation.get("status") == "handoff" and bool(conversation.get("handoff_at")),
        f"conversation: {conversation}",
    )
    stage.report.expect(
        name,
        "the customer received no automatic reply",
        stage.channel is not None and not replies,
        "no channel server running" if stage.channel is None else f"received {replies!r}",
    )
    if stage.org.owner_webhook_secret is not None:
        ours = [
            (event, signed)
            for event, signed in await wait_owner_events(stage, "conversation.handoff")
            if run is not None and (event.get("data") or {}).get("run_id") == run["id"]
        ]
        for event, _ in ours:
            stage.report.step(f"→ owner's webhook: conversation.handoff — {(event.get('data') or {}).get('reason')}")
        stage.report.expect(
            name,
            "the owner's webhook heard of it once, signed (conversation.handoff)",
            len(ours) == 1 and ours[0][1],
            f"events for this run: {ours}",
        )
    return ScenarioResult(name, chat, messages, runs, replies, conversation)


async def budget_limited(stage: Stage) -> ScenarioResult:
    """The higher-priority agent, limited to a budget its first step cannot fit: aborted, no reply."""
    name = "budget"
    agent = stage.org.agents[BUDGET_AGENT]
    chat, messages, runs = await converse(
        stage,
        f"4. a budget-limited agent ({agent.name}, priority {agent.priority})",
        "Qual o status do meu pedido 4521?",
    )
    replies = await wait_replies(stage, chat, 0)
    run = runs[0] if runs else None
    reason = (run or {}).get("abort_reason") or (run or {}).get("error_code")
    stage.report.expect(
        name,
        "the higher-priority budget-limited agent took the message",
        run is not None and run["agent_id"] == agent.id,
    )
    stage.report.expect(
        name,
        "the run was aborted by its budget (budgetExceeded)",
        run is not None
        and run["status"] == "aborted"
        and reason in BUDGET_REASONS
        and run.get("error_family") == "budgetExceeded",
        f"status={(run or {}).get('status')} reason={reason} family={(run or {}).get('error_family')}",
    )
    stage.report.expect(
        name,
        "the customer received no reply from the aborted run",
        stage.channel is not None and not replies,
        "no channel server running" if stage.channel is None else f"received {replies!r}",
    )
    return ScenarioResult(name, chat, messages, runs, replies)


SCENARIOS: tuple[Callable[[Stage], Awaitable[ScenarioResult]], ...] = (tool_question, burst, handoff, budget_limited)
