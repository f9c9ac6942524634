"""Pure composition of one org's Home digest of one day [000 §5] from what the brief knows.

No I/O: the store loads :class:`DayInputs` (facts of the day, owner decisions, open
``/todo`` items, preferences) and :func:`compose` turns them into the stored document.
Equal inputs give an equal document — the basis of the brief's idempotency.

Document shape (JSON)::

    {"date", "time_zone", "sections": [...pinned first],
     "pulse": {"text", "runs", "replies", "handoffs", "spend_micros", "spend_yesterday_micros"},
     "done": [{"action_type", "area", "count", "text"}],
     "todo": [{"kind": "promote" | "proposed_action" | "insight" | "model_retired" | "todo", ..., "links": {...}}],
     "planets": [{"area", "label", "status", "done", "open", "pinned"}]}
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from services.brief.catalog import DigestCatalog
from switchboard.autonomy import PROMOTION_KEY_PREFIX, PROPOSAL_KEY_PREFIX
from switchboard.db.daily_brief import pinned_first

OPEN_INSIGHT_STATUSES = frozenset({"new", "seen"})
# One syllable ending consonant-vowel-consonant doubles its last letter before -ed.
_SHORT_CVC = re.compile(r"^[^aeiou]*[aeiou][^aeiouwxy]$")


@dataclass(frozen=True, slots=True)
class ActionFact:
    action_id: str
    action_type: str
    area: str
    summary: str

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> ActionFact:
        return cls(
            action_id=str(data["action_id"]),
            action_type=str(data["action_type"]),
            area=str(data["area"]),
            summary=str(data.get("summary") or ""),
        )


@dataclass(frozen=True, slots=True)
class RunFact:
    run_id: str
    replied: bool
    cost_micros: int
    executed: tuple[ActionFact, ...] = ()
    proposed: tuple[ActionFact, ...] = ()
    handed_back: bool = False
    unanswered: bool = False

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> RunFact:
        return cls(
            run_id=str(data["run_id"]),
            replied=bool(data.get("replied")),
            cost_micros=int(data.get("cost_micros") or 0),
            # Facts stored before 2026-12-02 lack both: false, as they were counted then.
            handed_back=bool(data.get("handed_back")),
            unanswered=bool(data.get("unanswered")),
            executed=tuple(ActionFact.from_payload(a) for a in data.get("executed") or ()),
            proposed=tuple(ActionFact.from_payload(a) for a in data.get("proposed") or ()),
        )


@dataclass(frozen=True, slots=True)
class RetiredModelUse:
    """A published agent still answering with a model the catalog retired (``ai_models.deprecated_at``):
    the provider may stop serving it any day, and every run of the agent would then fail."""

    agent_id: str
    agent_name: str
    provider: str
    model: str
    retired_on: date


@dataclass(frozen=True, slots=True)
class InsightFact:
    insight_id: str
    insight_key: str
    kind: str
    area: str
    title: str
    body: str
    status: str
    suggested_actions: tuple[Mapping[str, Any], ...] = ()
    proposed_action: ActionFact | None = None

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> InsightFact:
        proposed = data.get("proposed_action")
        return cls(
            insight_id=str(data["insight_id"]),
            insight_key=str(data["insight_key"]),
            kind=str(data["kind"]),
            area=str(data["area"]),
            title=str(data["title"]),
            body=str(data.get("body") or ""),
            status=str(data.get("status") or "new"),
            suggested_actions=tuple(data.get("suggested_actions") or ()),
            proposed_action=None if not proposed else ActionFact.from_payload(proposed),
        )


@dataclass(frozen=True, slots=True)
class Promotion:
    """An action type approved ``approvals`` times in an area not yet on ``auto``."""

    area: str
    action_type: str
    approvals: int


@dataclass(frozen=True, slots=True)
class RunTotals:
    """The day's runs counted by the database: how many, how many replied, what they cost.

    ``replies`` leaves out the replies the channel refused (their delivery ``failed``), which
    ``undelivered`` counts: the owner must not read "5 replies" when two never reached anyone.
    ``unanswered``: runs that failed or were aborted with their customer still waiting.
    ``runs`` leaves out runs handed back at a shutdown (recovered by another attempt, which is
    the run that counts); their cost is in ``spend_micros``."""

    runs: int
    replies: int
    spend_micros: int
    undelivered: int = 0
    unanswered: int = 0


@dataclass(frozen=True)
class DayInputs:
    """Everything one day's digest depends on (loaded by ``services.brief.store``).

    ``runs``: the run facts the sections read one by one — with ``totals`` given, only those
    that executed or proposed an action (the store counts the rest in SQL instead of
    loading every run of the day); without it, every run, and the totals are theirs."""

    day: date
    time_zone: str
    runs: Sequence[RunFact] = ()
    totals: RunTotals | None = None
    handoffs: int = 0
    spend_yesterday_micros: int = 0
    insights: Sequence[InsightFact] = ()
    # Still waiting from the days before (``CARRY_OVER_DAYS``): insights, and runs that proposed
    # actions. Only their to-do items are listed, never their work in "done" or the pulse.
    earlier_insights: Sequence[InsightFact] = ()
    earlier_runs: Sequence[RunFact] = ()
    # The owner's status of an insight (workspace_insights, by insight key) wins over the record's.
    insight_status: Mapping[str, str] = field(default_factory=dict)
    # Proposed actions (by action id) the owner already decided: no longer to do.
    decided_actions: frozenset[str] = frozenset()
    promotions: Sequence[Promotion] = ()
    todos: Sequence[Mapping[str, Any]] = ()
    # Published agents on retired models, as the catalog stands when the digest is composed.
    retired_models: Sequence[RetiredModelUse] = ()
    pinned_sections: Sequence[str] = ()
    pinned_areas: Sequence[str] = ()


# --------------------------------------------------------------------------- phrasing


def past_tense(verb: str, irregular: Mapping[str, str]) -> str:
    if verb in irregular:
        return irregular[verb]
    if verb.endswith("e"):
        return f"{verb}d"
    if verb.endswith("y") and len(verb) > 1 and verb[-2] not in "aeiou":
        return f"{verb[:-1]}ied"
    if _SHORT_CVC.match(verb):
        return f"{verb}{verb[-1]}ed"  # tag -> tagged, stop -> stopped
    return f"{verb}ed"


def plural(noun: str) -> str:
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return f"{noun}es"
    if noun.endswith("y") and len(noun) > 1 and noun[-2] not in "aeiou":
        return f"{noun[:-1]}ies"
    return f"{noun}s"


def done_phrase(action_type: str, count: int, irregular: Mapping[str, str]) -> str:
    """``send_reminder`` x3 -> ``sent 3 reminders``; a one-word type reads ``archived 2 times``."""
    verb, _, rest = action_type.partition("_")
    words = rest.replace("_", " ").strip()
    past = past_tense(verb, irregular)
    if not words:
        return f"{past} {count} time{'s' if count != 1 else ''}"
    head, _, last = words.rpartition(" ")
    noun = last if count == 1 else plural(last)
    return f"{past} {count} {head + ' ' if head else ''}{noun}"


def action_done_text(catalog: DigestCatalog, action_type: str, count: int) -> str:
    """The done list's phrase: the catalog's wording for a known tool, else built from the name."""
    wording = catalog.actions.get(action_type)
    return wording.counted(count) if wording is not None else done_phrase(action_type, count, catalog.irregular_past)


def action_label(catalog: DigestCatalog, action_type: str) -> str:
    """What a card calls an action type: the catalog's label, else the type itself."""
    wording = catalog.actions.get(action_type)
    return wording.label if wording is not None else action_type


def money(micros: int) -> str:
    return f"${micros / 1_000_000:.2f}"


def _count(n: int, singular: str) -> str:
    return f"{n} {singular if n == 1 else plural(singular)}"


# --------------------------------------------------------------------------- sections


def totals(inputs: DayInputs) -> RunTotals:
    if inputs.totals is not None:
        return inputs.totals
    return RunTotals(
        runs=sum(1 for r in inputs.runs if not r.handed_back),
        replies=sum(1 for r in inputs.runs if r.replied),
        spend_micros=sum(r.cost_micros for r in inputs.runs),
        unanswered=sum(1 for r in inputs.runs if r.unanswered),
    )


def pulse(inputs: DayInputs) -> dict[str, Any]:
    counted = totals(inputs)
    runs, replies, spend = counted.runs, counted.replies, counted.spend_micros
    undelivered = f" ({counted.undelivered} not delivered)" if counted.undelivered else ""
    unanswered = f" · {counted.unanswered} left unanswered" if counted.unanswered else ""
    text = (
        f"{_count(runs, 'run')} · {_count(replies, 'reply')}{undelivered}{unanswered} · "
        f"{_count(inputs.handoffs, 'handoff')} · "
        f"spend {money(spend)} (yesterday {money(inputs.spend_yesterday_micros)})"
    )
    return {
        "text": text,
        "runs": runs,
        "replies": replies,
        "undelivered": counted.undelivered,
        "unanswered": counted.unanswered,
        "handoffs": inputs.handoffs,
        "spend_micros": spend,
        "spend_yesterday_micros": inputs.spend_yesterday_micros,
    }


def done(inputs: DayInputs, catalog: DigestCatalog) -> list[dict[str, Any]]:
    """Executed actions grouped by (type, area), most frequent first; each action counted once."""
    seen: set[str] = set()
    counts: Counter[tuple[str, str]] = Counter()
    for run in inputs.runs:
        for action in run.executed:
            if action.action_id in seen:
                continue
            seen.add(action.action_id)
            counts[(action.action_type, action.area)] += 1
    groups = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [
        {
            "action_type": action_type,
            "area": area,
            "count": n,
            "text": action_done_text(catalog, action_type, n),
        }
        for (action_type, area), n in groups
    ]


def _links(catalog: DigestCatalog, kind: str, **values: str) -> dict[str, str]:
    links = catalog.links[kind]
    return {"approve": links.approve.format(**values), "ignore": links.ignore.format(**values)}


def _action_item(action: ActionFact, catalog: DigestCatalog, **extra: Any) -> dict[str, Any]:
    """A proposal's card. A known tool is titled by its catalog label ("Send a WhatsApp
    message"), not by the run's summary, which names the tool ("crm_send_… proposed by the agent")."""
    title = extra.pop("title", action.summary)
    if action.action_type in catalog.actions:
        title = action_label(catalog, action.action_type)
    return {
        "kind": "proposed_action",
        "action_id": action.action_id,
        "action_type": action.action_type,
        "area": action.area,
        "title": title,
        **extra,
        "links": _links(catalog, "proposed_action", action_id=action.action_id),
    }


def _proposal_id(insight: InsightFact) -> str | None:
    """The action id of a proposed action's insight whose record does not carry the action."""
    if insight.kind != "proposed_action" or not insight.insight_key.startswith(PROPOSAL_KEY_PREFIX):
        return None
    return insight.insight_key.removeprefix(PROPOSAL_KEY_PREFIX)


def todo(inputs: DayInputs, catalog: DigestCatalog) -> list[dict[str, Any]]:
    """Promote suggestions, then proposed actions, then insights, then the owner's own items —
    whatever still waits, from this day or the ones before it."""
    promotions = [
        {
            "kind": "promote",
            "area": p.area,
            "action_type": p.action_type,
            "approvals": p.approvals,
            "title": (
                f"You approved “{action_label(catalog, p.action_type)}” {p.approvals} times: "
                "let agents do it on their own?"
            ),
            "links": _links(catalog, "promote", area=p.area, action_type=p.action_type),
        }
        for p in sorted(inputs.promotions, key=lambda p: (p.area, p.action_type))
    ]
    proposals: dict[str, dict[str, Any]] = {}
    closed_proposals: set[str] = set()
    insights: list[dict[str, Any]] = []
    # An insight key is a fact of one day only (its latest record's), so the lists never overlap.
    every_insight = [*inputs.earlier_insights, *inputs.insights]
    for insight in sorted(every_insight, key=lambda i: (i.area, i.insight_key)):
        status = inputs.insight_status.get(insight.insight_key, insight.status)
        if insight.insight_key.startswith(PROMOTION_KEY_PREFIX):
            continue  # a promote suggestion's own row: its card is the promotion above, never a second one
        action = insight.proposed_action
        proposal_id = action.action_id if action is not None else _proposal_id(insight)
        if proposal_id is not None:
            # A proposed action's Home card. A status change made through /insights (seen, dismissed)
            # comes as a record without the action: the card stays one card (the run reported the
            # action too), and a dismissed one stays off the list (it was brought back from the run).
            if status not in OPEN_INSIGHT_STATUSES:
                closed_proposals.add(proposal_id)
            elif action is not None and proposal_id not in inputs.decided_actions:
                proposals[proposal_id] = _action_item(
                    action, catalog, title=insight.title, body=insight.body, insight_key=insight.insight_key
                )
            continue
        if status not in OPEN_INSIGHT_STATUSES:
            continue
        insights.append(
            {
                "kind": "insight",
                "insight_id": insight.insight_id,
                "insight_key": insight.insight_key,
                "area": insight.area,
                "title": insight.title,
                "body": insight.body,
                "status": status,
                "suggested_actions": [dict(a) for a in insight.suggested_actions],
                "links": _links(catalog, "insight", insight_id=insight.insight_id),
            }
        )
    # Proposed actions a run reported without an insight record of their own.
    for run in [*inputs.earlier_runs, *inputs.runs]:
        for action in run.proposed:
            known = proposals.keys() | inputs.decided_actions | closed_proposals
            if action.action_id not in known:
                proposals[action.action_id] = _action_item(action, catalog)
    ordered = sorted(proposals.values(), key=lambda item: (item["area"], item["action_type"], item["action_id"]))
    retired = [
        _retired_model_item(use) for use in sorted(inputs.retired_models, key=lambda u: (u.agent_name, u.agent_id))
    ]
    return [*promotions, *ordered, *insights, *retired, *(dict(t) for t in inputs.todos)]


def _retired_model_item(use: RetiredModelUse) -> dict[str, Any]:
    """The card of an agent on a retired model: what to do is publish a version with a current one."""
    return {
        "kind": "model_retired",
        "id": f"model_retired:{use.agent_id}:{use.provider}:{use.model}",
        "agent_id": use.agent_id,
        "agent_name": use.agent_name,
        "provider": use.provider,
        "model": use.model,
        "retired_on": use.retired_on.isoformat(),
        "title": (
            f"“{use.agent_name}” still answers with {use.model}, retired on {use.retired_on.isoformat()}: "
            "publish a version with a current model before the provider stops serving it"
        ),
        "links": {"agent": f"/api/v1/agents/{use.agent_id}", "models": "/api/v1/models"},
    }


def planets(
    inputs: DayInputs,
    catalog: DigestCatalog,
    done_items: Iterable[Mapping[str, Any]],
    todo_items: Iterable[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """Health per area: ``attention`` with open items, ``active`` with work done, else ``quiet``."""
    done_by_area: Counter[str] = Counter()
    for item in done_items:
        done_by_area[str(item["area"])] += int(item["count"])
    open_by_area: Counter[str] = Counter(str(item["area"]) for item in todo_items if "area" in item)
    by_area = {planet.area: planet for planet in catalog.planets}
    pinned = set(inputs.pinned_areas) & set(by_area)
    result = []
    for area in pinned_first(list(by_area), inputs.pinned_areas):
        planet = by_area[area]
        n_open, n_done = open_by_area[planet.area], done_by_area[planet.area]
        status = "attention" if n_open else "active" if n_done else "quiet"
        result.append(
            {
                "area": planet.area,
                "label": planet.label,
                "status": status,
                "done": n_done,
                "open": n_open,
                "pinned": planet.area in pinned,
            }
        )
    return result


def section_order(pinned: Sequence[str], catalog: DigestCatalog) -> list[str]:
    return pinned_first(catalog.sections, pinned)


def compose(inputs: DayInputs, catalog: DigestCatalog) -> dict[str, Any]:
    """The digest document of ``inputs.day`` (deterministic: no clock, no randomness)."""
    done_items = done(inputs, catalog)
    todo_items = todo(inputs, catalog)
    return {
        "date": inputs.day.isoformat(),
        "time_zone": inputs.time_zone,
        "sections": section_order(inputs.pinned_sections, catalog),
        "pulse": pulse(inputs),
        "done": done_items,
        "todo": todo_items,
        "planets": planets(inputs, catalog, done_items, todo_items),
    }
