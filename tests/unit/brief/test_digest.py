"""The pure digest composition: phrasing, grouping, to-do order, planets, pinned sections."""

from __future__ import annotations

from datetime import date

import pytest

from services.brief.catalog import load_catalog
from services.brief.digest import (
    ActionFact,
    DayInputs,
    InsightFact,
    Promotion,
    RetiredModelUse,
    RunFact,
    RunTotals,
    compose,
    done_phrase,
    section_order,
    todo,
)
from switchboard.areas import area_slugs
from switchboard.db.daily_brief import HOME_SECTIONS, pinned_first
from switchboard.tool_catalog import CANCEL_FOLLOWUP, SCHEDULE_FOLLOWUP, SEND_WHATSAPP_MESSAGE, WRITE_TOOL_AREAS

CATALOG = load_catalog()
DAY = date(2026, 11, 30)


def _action(n: int, action_type: str = "send_reminder", area: str = "booking") -> ActionFact:
    return ActionFact(action_id=f"a{n}", action_type=action_type, area=area, summary=f"{action_type} #{n}")


@pytest.mark.parametrize(
    ("action_type", "count", "expected"),
    [
        ("send_reminder", 3, "sent 3 reminders"),
        ("send_reminder", 1, "sent 1 reminder"),
        ("fill_waitlist_slot", 2, "filled 2 waitlist slots"),
        ("create_lead", 2, "created 2 leads"),
        ("tag_contact", 1, "tagged 1 contact"),
        ("reply_inquiry", 4, "replied 4 inquiries"),
        ("archive", 2, "archived 2 times"),
    ],
)
def test_done_phrases(action_type: str, count: int, expected: str) -> None:
    assert done_phrase(action_type, count, CATALOG.irregular_past) == expected


def test_a_known_day_composes_to_the_expected_document() -> None:
    runs = [
        RunFact("r1", replied=True, cost_micros=120_000, executed=(_action(1), _action(2))),
        RunFact("r2", replied=True, cost_micros=80_000, executed=(_action(3), _action(4, "create_lead", "crm"))),
        # A redelivered action id is counted once.
        RunFact(
            "r3",
            replied=False,
            cost_micros=50_000,
            executed=(_action(1),),
            proposed=(_action(9, "refund_order", "sales"),),
        ),
    ]
    insight = InsightFact(
        insight_id="i1",
        insight_key="crm:cold",
        kind="insight",
        area="crm",
        title="3 leads went cold",
        body="b",
        status="new",
    )
    dismissed = InsightFact(
        insight_id="i2", insight_key="web:slow", kind="insight", area="web", title="Slow site", body="", status="new"
    )
    todo = {"kind": "todo", "id": "t1", "text": "Call the supplier", "links": {"done": "/api/v1/home/todos/t1:done"}}
    inputs = DayInputs(
        day=DAY,
        time_zone="Europe/Rome",
        runs=runs,
        handoffs=1,
        spend_yesterday_micros=300_000,
        insights=[dismissed, insight],
        insight_status={"web:slow": "dismissed"},
        promotions=[Promotion(area="booking", action_type="send_reminder", approvals=3)],
        todos=[todo],
        pinned_sections=["todo", "nonsense"],
        pinned_areas=["crm"],
    )
    digest = compose(inputs, CATALOG)
    assert digest["date"] == "2026-11-30" and digest["time_zone"] == "Europe/Rome"
    assert digest["sections"] == ["todo", "pulse", "done", "planets"]
    assert digest["pulse"] == {
        "text": "3 runs · 2 replies · 1 handoff · spend $0.25 (yesterday $0.30)",
        "runs": 3,
        "replies": 2,
        "undelivered": 0,
        "unanswered": 0,
        "handoffs": 1,
        "spend_micros": 250_000,
        "spend_yesterday_micros": 300_000,
    }
    assert digest["done"] == [
        {"action_type": "send_reminder", "area": "booking", "count": 3, "text": "sent 3 reminders"},
        {"action_type": "create_lead", "area": "crm", "count": 1, "text": "created 1 lead"},
    ]
    assert [item["kind"] for item in digest["todo"]] == ["promote", "proposed_action", "insight", "todo"]
    promote, proposed, open_insight, own = digest["todo"]
    assert promote["links"] == {
        "approve": "/api/v1/autonomy/booking/promotions/send_reminder:accept",
        "ignore": "/api/v1/autonomy/booking/promotions/send_reminder:dismiss",
    }
    assert proposed["action_id"] == "a9" and proposed["links"]["approve"] == "/api/v1/decisions/a9:approve"
    assert (
        open_insight["insight_key"] == "crm:cold" and open_insight["links"]["ignore"] == "/api/v1/insights/i1:dismiss"
    )
    assert own == todo
    planets = {p["area"]: p for p in digest["planets"]}
    assert digest["planets"][0]["area"] == "crm" and planets["crm"]["pinned"] is True
    assert planets["crm"]["status"] == "attention" and planets["crm"]["open"] == 1 and planets["crm"]["done"] == 1
    assert planets["booking"] == {
        "area": "booking",
        "label": "Booking",
        "status": "attention",
        "done": 3,
        "open": 1,
        "pinned": False,
    }
    assert planets["marketing"]["status"] == "quiet"
    assert [p["area"] for p in digest["planets"]] == ["crm", "booking", "sales", "marketing", "content", "web", "cross"]


def test_a_decided_proposal_leaves_the_todo_list() -> None:
    action = _action(7, "refund_order", "sales")
    proposal = InsightFact(
        insight_id="i7",
        insight_key="proposal:a7",
        kind="proposed_action",
        area="sales",
        title="Refund order 42?",
        body="",
        status="new",
        proposed_action=action,
    )
    inputs = DayInputs(day=DAY, time_zone="UTC", runs=[RunFact("r", False, 0, proposed=(action,))], insights=[proposal])
    items = compose(inputs, CATALOG)["todo"]
    assert len(items) == 1 and items[0]["title"] == "Refund order 42?" and items[0]["insight_key"] == "proposal:a7"
    decided = DayInputs(**{**inputs.__dict__, "decided_actions": frozenset({"a7"})})
    assert compose(decided, CATALOG)["todo"] == []


def _status_only(action_id: str, status: str) -> InsightFact:
    """The record /insights sends when the owner marks a proposal's card seen or dismissed: the
    row's fields, without the proposed action (switchboard.db.insights.status_record)."""
    return InsightFact(
        insight_id="i7",
        insight_key=f"decision:{action_id}",
        kind="proposed_action",
        area="sales",
        title="Refund order 42?",
        body="",
        status=status,
    )


@pytest.mark.parametrize(("status", "cards"), [("seen", 1), ("dismissed", 0)])
def test_a_proposal_marked_seen_stays_one_card_and_a_dismissed_one_leaves(status: str, cards: int) -> None:
    """Marked seen: still one card for the action (not a second, insight card whose approve link
    answers 409). Dismissed: off the list — not brought back from the run that proposed it."""
    action = _action(7, "refund_order", "sales")
    inputs = DayInputs(
        day=DAY,
        time_zone="UTC",
        runs=[RunFact("r", False, 0, proposed=(action,))],
        insights=[_status_only("a7", status)],
    )
    digest = compose(inputs, CATALOG)
    assert [(i["kind"], i.get("action_id")) for i in digest["todo"]] == [("proposed_action", "a7")] * cards
    sales = next(p for p in digest["planets"] if p["area"] == "sales")
    assert sales["open"] == cards


def test_a_promote_suggestions_own_row_is_never_a_second_card() -> None:
    """The promote row marked seen through /insights is a plain open insight: the promotion card
    is the only card (an insight card's approve would close the row and change no mode)."""
    row = InsightFact(
        insight_id="p1",
        insight_key="promote:crm:send_whatsapp",
        kind="insight",
        area="crm",
        title="Let agents run send_whatsapp automatically?",
        body="",
        status="seen",
    )
    promotion = Promotion(area="crm", action_type="send_whatsapp", approvals=3)
    items = compose(DayInputs(day=DAY, time_zone="UTC", insights=[row], promotions=[promotion]), CATALOG)["todo"]
    assert [i["kind"] for i in items] == ["promote"]


def test_equal_inputs_compose_equal_documents_whatever_the_fact_order() -> None:
    runs = [RunFact(f"r{i}", True, 1000 * i, executed=(_action(i, "send_reminder"),)) for i in range(5)]
    first = compose(DayInputs(day=DAY, time_zone="UTC", runs=runs), CATALOG)
    second = compose(DayInputs(day=DAY, time_zone="UTC", runs=list(reversed(runs))), CATALOG)
    assert first == second


def test_an_empty_day_is_quiet() -> None:
    digest = compose(DayInputs(day=DAY, time_zone="UTC"), CATALOG)
    assert digest["pulse"]["text"] == "0 runs · 0 replies · 0 handoffs · spend $0.00 (yesterday $0.00)"
    assert digest["done"] == [] and digest["todo"] == []
    assert {p["status"] for p in digest["planets"]} == {"quiet"}
    assert section_order([], CATALOG) == ["pulse", "done", "todo", "planets"]


def test_counted_totals_and_only_the_runs_with_actions_give_the_same_document() -> None:
    """What the store loads (totals counted in SQL, only action-bearing runs) composes the document
    that every run fact would."""
    quiet = [RunFact(f"q{i}", replied=i % 2 == 0, cost_micros=1_000 * i) for i in range(10)]
    busy = [
        RunFact("b1", replied=True, cost_micros=7_000, executed=(_action(1),)),
        RunFact("b2", replied=False, cost_micros=3_000, proposed=(_action(2, "refund_order", "sales"),)),
    ]
    every = compose(DayInputs(day=DAY, time_zone="UTC", runs=[*quiet, *busy]), CATALOG)
    counted = RunTotals(
        runs=12,
        replies=sum(r.replied for r in [*quiet, *busy]),
        spend_micros=sum(r.cost_micros for r in [*quiet, *busy]),
    )
    loaded = compose(DayInputs(day=DAY, time_zone="UTC", runs=busy, totals=counted), CATALOG)
    assert loaded == every
    assert loaded["pulse"]["runs"] == 12 and loaded["pulse"]["replies"] == 6


def test_the_shared_layout_defaults_are_the_digest_catalogs() -> None:
    """The API re-orders a stored digest with ``HOME_SECTIONS`` and the areas catalog; the brief
    composes with digest.yaml: they must list the same sections and areas in the same order."""
    catalog = load_catalog()
    assert tuple(catalog.sections) == HOME_SECTIONS
    assert tuple(p.area for p in catalog.planets) == area_slugs()


def test_pinned_names_come_first_in_pin_order_and_unknown_ones_are_ignored() -> None:
    assert pinned_first(["a", "b", "c", "d"], ["c", "x", "a", "c"]) == ["c", "a", "b", "d"]


def test_the_internal_tools_read_as_business_actions_on_the_home() -> None:
    """Action types are tool names; the owner reads what was done, not "crmed 3 send whatsapp messages"."""
    sent = [_action(n, SEND_WHATSAPP_MESSAGE, "crm") for n in range(3)]
    scheduled = [_action(10, SCHEDULE_FOLLOWUP, "crm")]
    proposed = _action(20, CANCEL_FOLLOWUP, "crm")
    inputs = DayInputs(
        day=DAY,
        time_zone="UTC",
        runs=[RunFact("r1", replied=True, cost_micros=1, executed=(*sent, *scheduled), proposed=(proposed,))],
        promotions=[Promotion(area="crm", action_type=SEND_WHATSAPP_MESSAGE, approvals=3)],
    )
    digest = compose(inputs, CATALOG)
    assert [item["text"] for item in digest["done"]] == ["sent 3 WhatsApp messages", "scheduled 1 follow-up"]
    promote, card = digest["todo"]
    assert promote["title"] == "You approved “Send a WhatsApp message” 3 times: let agents do it on their own?"
    assert card["kind"] == "proposed_action" and card["title"] == "Cancel a follow-up"
    # A type the catalog does not word is still phrased from its name.
    assert (
        compose(DayInputs(day=DAY, time_zone="UTC", runs=[RunFact("r", True, 1, (_action(1),))]), CATALOG)["done"][0][
            "text"
        ]
        == "sent 1 reminder"
    )


def test_every_autonomy_gated_tool_has_home_wording() -> None:
    assert set(CATALOG.actions) == set(WRITE_TOOL_AREAS), "a new gated tool needs its label in digest.yaml"


def test_replies_the_channel_refused_are_not_counted_as_replies() -> None:
    inputs = DayInputs(
        day=DAY, time_zone="UTC", runs=[], totals=RunTotals(runs=5, replies=3, spend_micros=0, undelivered=2)
    )
    pulse = compose(inputs, CATALOG)["pulse"]
    assert pulse["replies"] == 3 and pulse["undelivered"] == 2
    assert pulse["text"].startswith("5 runs · 3 replies (2 not delivered) · 0 handoffs")


def test_an_agent_on_a_retired_model_is_a_todo_item_with_what_to_do() -> None:
    later = RetiredModelUse("a2", "Vendas", "openai", "gpt-4o-mini", date(2026, 11, 30))
    first = RetiredModelUse("a1", "Agenda", "anthropic", "claude-3-haiku", date(2026, 11, 1))
    items = todo(DayInputs(day=date(2026, 12, 3), time_zone="UTC", retired_models=[later, first]), CATALOG)
    assert [(i["kind"], i["agent_id"], i["model"], i["retired_on"]) for i in items] == [
        ("model_retired", "a1", "claude-3-haiku", "2026-11-01"),
        ("model_retired", "a2", "gpt-4o-mini", "2026-11-30"),
    ]
    assert "publish a version with a current model" in items[0]["title"] and "Agenda" in items[0]["title"]
    assert items[0]["links"]["agent"] == "/api/v1/agents/a1"
