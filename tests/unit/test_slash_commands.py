"""The slash-command parser (issue 6 item 4): table-driven, pure."""

from __future__ import annotations

from decimal import Decimal

import pytest

from switchboard.slash_commands import CommandName, ParseError, SlashCommand, names_a_command, parse

C = CommandName


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/todo call Maria back", SlashCommand(C.TODO, text="call Maria back")),
        ("  /TODO   buy paper\nand pens ", SlashCommand(C.TODO, text="buy paper\nand pens")),
        ("/compact", SlashCommand(C.COMPACT)),
        ("/plan", SlashCommand(C.PLAN)),
        ("/plan migrate the price list", SlashCommand(C.PLAN, text="migrate the price list")),
        ("/loop", SlashCommand(C.LOOP)),
        ("/goal answer every lead", SlashCommand(C.GOAL, text="answer every lead")),
        ("/goal answer every lead --budget 5", SlashCommand(C.GOAL, text="answer every lead", budget_usd=Decimal(5))),
        ("/goal --budget=2.50 tidy the CRM", SlashCommand(C.GOAL, text="tidy the CRM", budget_usd=Decimal("2.50"))),
        ("/goal tidy --budget $3 the CRM", SlashCommand(C.GOAL, text="tidy the CRM", budget_usd=Decimal(3))),
        ("/skill:pricing", SlashCommand(C.SKILL, skill="pricing")),
        ("/skill:Pricing how much?", SlashCommand(C.SKILL, text="how much?", skill="pricing")),
        # The namespace keeps a skill named like a built-in reachable.
        ("/skill:plan", SlashCommand(C.SKILL, skill="plan")),
    ],
)
def test_commands(text: str, expected: SlashCommand) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "hello",
        "",
        "   ",
        "see /todo later",  # not at the start
        "/unknown do something",  # unknown command: plain text
        "/",
        "//todo x",
        "/home/user/file.txt",
        "/todo: x",
        "/12:30 tomorrow?",
    ],
)
def test_plain_text(text: str) -> None:
    assert parse(text) is None


def test_bare_skill_names_resolve_only_for_known_skills_and_never_shadow_built_ins() -> None:
    assert parse("/pricing how much?", skills=["pricing"]) == SlashCommand(C.SKILL, text="how much?", skill="pricing")
    assert parse("/pricing how much?") is None
    assert parse("/plan", skills=["plan"]) == SlashCommand(C.PLAN)


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("/goal --budget abc", "slash_goal_budget_invalid"),
        ("/goal grow --budget", "slash_goal_budget_invalid"),
        ("/goal grow --budget 0", "slash_goal_budget_invalid"),
        ("/goal grow --budget -3", "slash_goal_budget_invalid"),
        ("/goal grow --budget NaN", "slash_goal_budget_invalid"),
        ("/goal grow --budget 1e9", "slash_goal_budget_invalid"),
        ("/goal grow --budget 2 --budget 3", "slash_goal_budget_repeated"),
        ("/goal --budget 5", "slash_goal_text_required"),
        ("/goal", "slash_goal_text_required"),
        ("/todo", "slash_todo_text_required"),
        ("/todo    ", "slash_todo_text_required"),
        ("/todo " + "x" * 2001, "slash_todo_text_too_long"),
        ("/skill:", "slash_skill_name_required"),
        ("/skill:bad$name", "slash_skill_name_invalid"),
    ],
)
def test_malformed_known_commands_raise_a_stable_code_and_a_human_message(text: str, code: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse(text)
    assert caught.value.code == code
    assert caught.value.message.endswith(".") and len(caught.value.message) > 20


def test_where_each_command_is_handled() -> None:
    handled = {name for name in C if SlashCommand(name).handled_at_ingest}
    assert handled == {C.TODO, C.COMPACT, C.HANDBACK}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/handback", True),
        ("/goal win --budget abc", True),  # malformed, still written to the agent
        ("/todo", True),
        ("/desconto 10%", False),  # an unknown command is plain text
        ("Já respondo!", False),
        ("", False),
    ],
)
def test_names_a_command_tells_a_command_from_a_reply(text: str, expected: bool) -> None:
    assert names_a_command(text) is expected
