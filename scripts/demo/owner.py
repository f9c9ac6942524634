"""The owner's side of the demo (issue 6): a write proposed under ``propose`` autonomy, its to-do card
on Home, the approval that executes it exactly once, the ``/todo`` slash command, and the Home digest.

Like the customer scenarios (scripts/demo/scenario.py) every step goes through the product's own
doors — the signed webhook, ``/api/v1/decisions``, ``/api/v1/home/daily-brief`` — and records its
expectations in the :class:`Report`. Two facts no API exposes are read from the database, scoped
to the org by row-level security: the outbound message an approval queued (and whether anything
delivered it), and that a ``/todo`` was never stored as a message.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from scripts.demo.bootstrap import GENERAL_AGENT, post_webhook
from scripts.demo.scenario import (
    SCENARIOS,
    ScenarioResult,
    Stage,
    converse,
    db_rows,
    received,
    reply_expectations,
    wait_owner_events,
    wait_replies,
)
from switchboard.tool_catalog import SEND_WHATSAPP_MESSAGE

DIGEST_PATH = "/api/v1/home/daily-brief"
CATALOG_REQUEST = "Olá! Please send me the catalog — pode me mandar o catálogo?"
BUSINESS_NUMBER = "5511900000000@c.us"  # the demo's own WhatsApp number: what WAHA puts in ``from`` when fromMe
ALREADY_DECIDED = "action_already_decided"


async def _get_data(stage: Stage, path: str, **params: Any) -> Any:
    response = await stage.api.get(path, params=params or None, headers=stage.org.headers())
    response.raise_for_status()
    return response.json()["data"]


async def digest_until(stage: Stage, done: Callable[[dict[str, Any]], bool], timeout_s: float) -> dict[str, Any]:
    """Today's Home digest once ``done(digest)`` (the brief materializes it from the streams), or at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = await stage.api.get(DIGEST_PATH, headers=stage.org.headers())  # the org's today
        digest: dict[str, Any] = response.json()["data"].get("digest") or {} if response.status_code == 200 else {}
        if done(digest) or time.monotonic() > deadline:
            return digest
        await asyncio.sleep(0.5)


def todo_items(digest: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [i for i in digest.get("todo") or [] if isinstance(i, dict) and i.get("kind") == kind]


def _todo_line(item: dict[str, Any]) -> str:
    links = item.get("links") or {}
    link = f"  (approve: POST {links['approve']})" if links.get("approve") else ""
    return f"[{item.get('kind')}] {item.get('title') or item.get('text')}{link}"


def _outbound_rows(stage: Stage, conversation_id: str, body: str) -> list[dict[str, Any]]:
    """Outbound messages of the conversation with this text, and their delivery claim (if any)."""
    return db_rows(
        stage.database_url,
        stage.org.org_id,
        "SELECT m.id, m.delivery_status, m.run_id, d.status AS claim FROM messages m"
        " LEFT JOIN run_deliveries d ON d.message_id = m.id"
        " WHERE m.conversation_id = :c AND m.direction = 'outbound' AND m.body = :body",
        {"c": conversation_id, "body": body},
    )


async def _approve(stage: Stage, path: str) -> tuple[int, dict[str, Any]]:
    response = await stage.api.post(path, json={"reason": "demo: approved by the owner"}, headers=stage.org.headers())
    return response.status_code, response.json()


async def propose_and_approve(stage: Stage) -> ScenarioResult:
    """The customer asks for the catalog; the agent's send is proposed, shows on Home, is approved once."""
    name = "propose → approve"
    areas = (await _get_data(stage, "/api/v1/autonomy"))["areas"]
    crm: dict[str, Any] = next((a for a in areas if a["area"] == "crm"), {})
    chat, messages, runs = await converse(
        stage, "5. a write action proposed under propose autonomy, then approved once", CATALOG_REQUEST
    )
    stage.report.kv("autonomy (crm area)", f"mode={crm.get('mode')} effective={crm.get('effective_mode')}")
    stage.report.expect(name, "the crm area proposes (the default)", crm.get("effective_mode") == "propose", str(crm))
    replies = await wait_replies(stage, chat, 1)
    run = runs[0] if runs else None
    decisions = await _get_data(stage, "/api/v1/decisions", status="proposed") if run else []
    decision = next((d for d in decisions if d["run_id"] == (run or {}).get("id")), None)
    text = str(((decision or {}).get("proposed_action") or {}).get("arguments", {}).get("text", ""))
    if decision is not None:
        stage.report.step(f"proposed action {decision['id'][:8]}: {decision['action_type']} (area {decision['area']})")
        stage.report.kv("  text to send", repr(text))
    stage.report.expect(
        name,
        f"the general agent's run completed and proposed {SEND_WHATSAPP_MESSAGE} (not executed)",
        run is not None
        and run["status"] == "completed"
        and run["agent_id"] == stage.org.agents[GENERAL_AGENT].id
        and decision is not None
        and decision["action_type"] == SEND_WHATSAPP_MESSAGE
        and decision["autonomy_tier"] == "propose",
        f"run {(run or {}).get('status')}, proposed decisions of the run: {decision}",
    )
    reply_expectations(stage, name, runs, replies)  # the run's answer only: the catalog was not sent
    result = ScenarioResult(name, chat, messages, runs, replies)
    if decision is None or run is None:
        return result
    result.details["decision"] = decision
    digest = await digest_until(
        stage,
        lambda d: any(i.get("action_id") == decision["id"] for i in todo_items(d, "proposed_action")),
        stage.timeout_s / 2,
    )
    card = next((i for i in todo_items(digest, "proposed_action") if i.get("action_id") == decision["id"]), None)
    if card is not None:
        stage.report.kv("Home to-do", _todo_line(card))
    stage.report.expect(name, "the proposal is a card in the Home digest's to-do list", card is not None)
    approve = str(((card or {}).get("links") or {}).get("approve") or f"/api/v1/decisions/{decision['id']}:approve")
    status, body = await _approve(stage, approve)
    approved = body.get("data") or {}
    stage.report.step(f"owner: POST {approve} → HTTP {status}, decision {approved.get('status')}")
    stage.report.kv("  execution_result", approved.get("execution_result"))
    stage.report.expect(
        name,
        "the approval executed the action (status executed, the message queued)",
        status == 200
        and approved.get("status") == "executed"
        and ((approved.get("execution_result") or {}).get("result") or {}).get("status") == "queued",
        f"HTTP {status}: {body}",
    )
    again, again_body = await _approve(stage, approve)
    code = (again_body.get("error") or {}).get("code")
    stage.report.step(f"owner: the same approval again → HTTP {again} {code}")
    stage.report.expect(name, "a second approval executes nothing (409)", again == 409 and code == ALREADY_DECIDED)
    result.details["approvals"] = [status, again]
    await _delivery(stage, name, run, text, result)
    return result


async def _delivery(stage: Stage, name: str, run: dict[str, Any], text: str, result: ScenarioResult) -> None:
    """The approved message: recorded once, and received by the customer exactly once (the
    approval republishes the Home item as actioned; the notifier then sends what it queued)."""

    async def copies_received() -> list[dict[str, Any]]:
        return [r for r in await received(stage, result.chat_id) if r.get("text") == text]

    deadline = time.monotonic() + min(stage.timeout_s, 5.0)
    while not await copies_received() and time.monotonic() < deadline and stage.channel is not None:
        await asyncio.sleep(0.3)
    await asyncio.sleep(stage.settle_s)
    copies = await copies_received()
    rows = await asyncio.to_thread(_outbound_rows, stage, str(run["conversation_id"]), text)
    result.details.update(delivered=copies, outbound=rows)
    for row in rows:
        stage.report.kv(
            "  outbound message",
            f"{str(row['id'])[:8]} run={str(row['run_id'])[:8]} delivery_status={row['delivery_status']}"
            f" claim={row['claim'] or 'none'}",
        )
    stage.report.expect(
        name, "exactly one outbound message was recorded for the action", len(rows) == 1, f"{len(rows)} rows"
    )
    for copy in copies:
        stage.report.reply(result.chat_id, str(copy.get("text")))
    stage.report.expect(
        name,
        "the customer received the approved message exactly once",
        len(copies) == 1,
        f"received {len(copies)} copies",
    )


async def slash_todo(stage: Stage, chat_id: str, conversation_id: str | None) -> ScenarioResult:
    """The owner, from the business phone, writes ``/todo …`` in a customer's chat: a Home item, no message, no run."""
    name = "/todo"
    stage.report.section("6. the /todo slash command (the owner, from the business phone)")
    item = f"Ligar para {chat_id.split('@')[0]} sobre o catálogo impresso"
    command = f"/todo {item}"
    runs_before = await _runs_of(stage, conversation_id)
    stage.report.step(f"owner in chat {chat_id}: {command!r}")
    payload = {
        "id": f"wamid.{uuid.uuid4().hex}",
        "timestamp": time.time(),
        "from": BUSINESS_NUMBER,
        "fromMe": True,
        "to": chat_id,
        "body": command,
    }
    first = await post_webhook(stage.api, stage.org, "message", payload)
    again = await post_webhook(stage.api, stage.org, "message", payload)  # WAHA redelivers
    stage.report.step(f"webhook → {first}; the same delivery again → {again}")
    stage.report.expect(
        name,
        "ingest handled it (reason slash_todo): no message stored, nothing dispatched",
        first.get("reason") == "slash_todo" and first.get("message_id") is None and not first.get("dispatched"),
        str(first),
    )
    stage.report.expect(
        name,
        "a redelivery adds nothing (duplicate)",
        again.get("reason") == "slash_todo" and again.get("duplicate") is True,
    )
    digest = await digest_until(stage, lambda d: any(i.get("text") == item for i in todo_items(d, "todo")), 10.0)
    items = [i for i in todo_items(digest, "todo") if i.get("text") == item]
    for entry in items:
        stage.report.kv("Home to-do", f"{_todo_line(entry)} (conversation {entry.get('conversation_id')})")
    stage.report.expect(
        name,
        "the Home digest lists the item once, with the conversation",
        len(items) == 1 and (conversation_id is None or items[0].get("conversation_id") == conversation_id),
        f"todo items: {todo_items(digest, 'todo')}",
    )
    await asyncio.sleep(stage.settle_s)
    stored = await asyncio.to_thread(
        db_rows, stage.database_url, stage.org.org_id, "SELECT id FROM messages WHERE body = :b", {"b": command}
    )
    runs_after = await _runs_of(stage, conversation_id)
    stage.report.expect(
        name,
        "never stored as a message nor sent to the agent (no message row, no new run)",
        not stored and runs_after == runs_before,
        f"{len(stored)} message rows; runs of the conversation {runs_before} → {runs_after}",
    )
    result = ScenarioResult(name, chat_id, [], [], [])
    result.details.update(item=item, webhook=[first, again], todo=items, stored=stored)
    return result


async def _runs_of(stage: Stage, conversation_id: str | None) -> int:
    if conversation_id is None:
        return 0
    return len(await _get_data(stage, "/api/v1/runs", conversation_id=conversation_id, limit=200))


async def home_digest(
    stage: Stage, runs_played: int, handoffs_played: int, todo_text: str | None = None
) -> dict[str, Any]:
    """Today's Home digest, once it counts the runs the demo played: pulse, handoff, done, to-do, planets."""
    name = "home digest"
    stage.report.section("7. the Home digest")

    decided = {d["id"]: d["status"] for d in await _get_data(stage, "/api/v1/decisions", limit=200)}

    def stale_items(digest: dict[str, Any]) -> list[dict[str, Any]]:
        """Proposals still on the to-do list although the owner decided them."""
        return [
            i
            for i in todo_items(digest, "proposed_action")
            if decided.get(i.get("action_id"), "proposed") != "proposed"
        ]

    def complete(digest: dict[str, Any]) -> bool:
        listed = todo_text is None or any(i.get("text") == todo_text for i in todo_items(digest, "todo"))
        counted = _pulse(digest, "runs") >= runs_played and _pulse(digest, "handoffs") >= handoffs_played
        return counted and listed and not stale_items(digest)

    digest = await digest_until(stage, complete, stage.timeout_s / 2)
    pulse = digest.get("pulse") or {}
    stage.report.kv("pulse", pulse.get("text", pulse))
    stage.report.kv(
        "runs/replies/handoffs",
        f"{_pulse(digest, 'runs')} / {_pulse(digest, 'replies')} / {_pulse(digest, 'handoffs')}",
    )
    for item in digest.get("done") or []:
        stage.report.kv("done", item.get("text") or item)
    stale = stale_items(digest)
    for item in digest.get("todo") or []:
        note = f" — already {decided[item['action_id']]}" if item in stale else ""
        stage.report.kv("to-do", _todo_line(item) + note)
    planets = [f"{p.get('label')}: {p.get('status')}" for p in digest.get("planets") or [] if isinstance(p, dict)]
    if planets:
        stage.report.kv("planets", ", ".join(planets))
    stage.report.expect(
        name,
        f"the digest counts the {runs_played} runs played and the {handoffs_played} handoff(s)",
        _pulse(digest, "runs") >= runs_played and _pulse(digest, "handoffs") >= handoffs_played,
        f"pulse {pulse}",
    )
    stage.report.expect(
        name,
        "a decided proposal leaves the to-do list",
        not stale,
        f"still listed: {[i.get('action_id') for i in stale]}",
    )
    if todo_text is not None:
        stage.report.expect(
            name,
            "its to-do list has the /todo item",
            any(i.get("text") == todo_text for i in todo_items(digest, "todo")),
            f"todo: {digest.get('todo')}",
        )
    return digest


def _pulse(digest: dict[str, Any], key: str) -> int:
    pulse = digest.get("pulse")
    value = pulse.get(key) if isinstance(pulse, dict) else None
    return value if isinstance(value, int) else 0


async def morning_push(stage: Stage, digest: dict[str, Any]) -> dict[str, Any] | None:
    """The owner is told: the morning push turned on for this very hour, then the ``home.digest``
    event the notifier sends to the org webhook (the channel server's owner inbox), once, signed."""
    name = "morning push"
    stage.report.section("8. the morning push — the digest to the owner's webhook")
    if stage.org.owner_webhook_secret is None:
        stage.report.skip(name, "the digest reaches the owner's webhook", "no owner inbox (channel server) in this run")
        return None
    org = await _get_data(stage, "/api/v1/organization")
    hour = datetime.now(ZoneInfo(org["time_zone"])).hour
    turned_on = await stage.api.patch("/api/v1/organization", json={"digest_hour": hour}, headers=stage.org.headers())
    stage.report.step(f"PATCH /api/v1/organization digest_hour={hour} (the org's local hour now; default 8)")
    pushes = await wait_owner_events(stage, "home.digest")
    event, signed = pushes[0] if pushes else ({}, False)
    data = event.get("data") or {}
    if pushes:
        stage.report.kv("→ owner's webhook", f"home.digest {data.get('date')}: {data.get('summary')}")
    waiting = len((data.get("digest") or {}).get("todo") or [])
    stage.report.expect(
        name,
        "the day's digest reached the owner's webhook once, signed (home.digest)",
        turned_on.status_code == 200 and len(pushes) == 1 and signed,
        f"PATCH {turned_on.status_code}; events: {[e for e, _ in pushes]}",
    )
    stage.report.expect(
        name,
        "it is today's digest, with what waits for the owner",
        data.get("date") == digest.get("date") and waiting >= len(digest.get("todo") or []),
        f"pushed {data.get('date')} with {waiting} to-do items; Home showed {digest.get('date')}",
    )
    return data


async def play(stage: Stage) -> list[ScenarioResult]:
    """The whole script: the customer scenarios, the owner's steps (in the catalog customer's chat), the
    digest, and the morning push that tells the owner."""
    results = [await scenario(stage) for scenario in SCENARIOS]
    proposal = await propose_and_approve(stage)
    results.append(proposal)
    conversation = str(proposal.runs[0]["conversation_id"]) if proposal.runs else None
    todo = await slash_todo(stage, proposal.chat_id, conversation)
    runs = [run for r in results for run in r.runs]
    digest = await home_digest(stage, len(runs), sum(run["status"] == "handoff" for run in runs), todo.details["item"])
    await morning_push(stage, digest)
    return [*results, todo]
