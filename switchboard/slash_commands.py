"""Slash commands parsed from the raw user text [002 "I comandi slash"], shared by ingest and the runner.

Pure: no I/O, no settings. :func:`parse` answers one of three things:

- ``None`` — plain text: not a command, or a ``/word`` that is neither built in
  nor a known skill (an unknown command passes as plain text);
- a :class:`SlashCommand` — a built-in (``/todo``, ``/compact``, ``/handback``,
  ``/plan``, ``/goal``, ``/loop``), a namespaced skill (``/skill:<name>``), or a bare
  skill name kept for messages written before the ``skill:`` namespace
  existed (only when the caller passes the agent's skill names, and never
  shadowing a built-in);
- :class:`ParseError` raised — a *known* command written wrongly
  (``/goal --budget abc``), with a stable ``code`` and a message for the user.

Where each is handled: ``/todo``, ``/compact`` and ``/handback`` at ingest, before dispatch,
never stored as messages nor sent to the agent; ``/plan`` switches the
conversation's mode; ``/goal``, ``/loop`` and skills inside the run.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Final

from switchboard.db.todos import MAX_TODO_CHARS


class CommandName(StrEnum):
    TODO = "todo"
    COMPACT = "compact"
    PLAN = "plan"
    GOAL = "goal"
    LOOP = "loop"
    SKILL = "skill"
    HANDBACK = "handback"


BUILT_INS: Final = frozenset(
    {
        CommandName.TODO,
        CommandName.COMPACT,
        CommandName.PLAN,
        CommandName.GOAL,
        CommandName.LOOP,
        CommandName.HANDBACK,
    }
)
# Handled where the message arrives: never stored as a message, never sent to the agent.
INGEST_COMMANDS: Final = frozenset({CommandName.TODO, CommandName.COMPACT, CommandName.HANDBACK})
# What the runner acts on: the owner may write these from the business phone (see is_run_command).
RUN_COMMANDS: Final = frozenset({CommandName.PLAN, CommandName.GOAL, CommandName.LOOP, CommandName.SKILL})
SKILL_PREFIX: Final = "skill:"
MAX_BUDGET_USD: Final = Decimal("10000")

# The external id of a command sent through the API (``POST /conversations/{id}/commands``) rather
# than typed on the phone: the runner keeps its fixed acknowledgements out of the customer's chat.
API_COMMAND_EXTERNAL_ID_PREFIX: Final = "api-command."

# ``run_requested.request_id`` of a run that only compacts the thread summary (``/compact`` at ingest).
COMPACT_REQUEST_PREFIX: Final = "slash:compact:"

_COMMAND = re.compile(r"^/([^\s/]+)(?:\s+(.*))?$", re.DOTALL)
_SKILL_NAME = re.compile(r"^[a-z0-9][a-z0-9_.\-]{0,63}$")
_BUDGET_OPTION = re.compile(r"(?:^|\s)--budget(?:=|\s+|$)(\S*)")


class ParseError(ValueError):
    """A known command written wrongly; ``code`` is stable, ``message`` is for the person who wrote it."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class SlashCommand:
    name: CommandName
    # What follows the command: the to-do item, the goal, the turn's input for a skill or /plan.
    text: str = ""
    # /goal --budget N, in US dollars.
    budget_usd: Decimal | None = None
    # /skill:<name>, or a bare legacy skill name.
    skill: str | None = None

    @property
    def handled_at_ingest(self) -> bool:
        return self.name in INGEST_COMMANDS


def parse(text: str, *, skills: Collection[str] = ()) -> SlashCommand | None:
    """The command in ``text`` (see the module docstring); ``skills`` are the agent's skill names."""
    match = _COMMAND.match(text.strip())
    if match is None:
        return None
    word, rest = match.group(1), (match.group(2) or "").strip()
    lowered = word.lower()
    if lowered.startswith(SKILL_PREFIX):
        return _skill(lowered.removeprefix(SKILL_PREFIX), rest)
    if lowered in BUILT_INS:
        return _built_in(CommandName(lowered), rest)
    if lowered in {s.lower() for s in skills}:
        return SlashCommand(CommandName.SKILL, text=rest, skill=lowered)
    return None


def _skill(name: str, rest: str) -> SlashCommand:
    if not name:
        raise ParseError("slash_skill_name_required", "Write the skill's name after /skill:, like /skill:pricing.")
    if not _SKILL_NAME.match(name):
        raise ParseError(
            "slash_skill_name_invalid",
            f"{name!r} is not a skill name: use letters, digits, '-', '_' or '.', like /skill:pricing.",
        )
    return SlashCommand(CommandName.SKILL, text=rest, skill=name)


def _built_in(name: CommandName, rest: str) -> SlashCommand:
    if name is CommandName.TODO:
        if not rest:
            raise ParseError("slash_todo_text_required", "Write what to add after /todo, like /todo call Maria back.")
        if len(rest) > MAX_TODO_CHARS:
            raise ParseError("slash_todo_text_too_long", f"A to-do item holds at most {MAX_TODO_CHARS} characters.")
        return SlashCommand(name, text=rest)
    if name is CommandName.GOAL:
        return _goal(rest)
    return SlashCommand(name, text=rest)


def _goal(rest: str) -> SlashCommand:
    budget: Decimal | None = None
    option = _BUDGET_OPTION.search(rest)
    if option is not None:
        raw = option.group(1)
        budget = _budget(raw)
        rest = (rest[: option.start()] + " " + rest[option.end() :]).strip()
        if _BUDGET_OPTION.search(rest):
            raise ParseError("slash_goal_budget_repeated", "Give --budget only once.")
    if not rest:
        raise ParseError(
            "slash_goal_text_required", "Write the goal after /goal, like /goal answer every lead --budget 5."
        )
    return SlashCommand(CommandName.GOAL, text=" ".join(rest.split()), budget_usd=budget)


def _budget(raw: str) -> Decimal:
    problem = ParseError(
        "slash_goal_budget_invalid",
        f"--budget needs an amount in US dollars greater than 0 and at most {MAX_BUDGET_USD}, like --budget 5"
        + (f" (got {raw[:20]!r})." if raw else "."),
    )
    try:
        value = Decimal(raw.removeprefix("$"))
    except InvalidOperation:
        raise problem from None
    if not value.is_finite() or value <= 0 or value > MAX_BUDGET_USD:
        raise problem
    return value


def is_run_command(text: str | None) -> bool:
    """A well-formed command the runner acts on (``/plan``, ``/goal``, ``/loop``, ``/skill:``).

    The owner writing one from the business phone starts autonomous work in that conversation,
    so ingest dispatches it although it is an own message, and a trigger's ``ignore_own`` lets
    it through (the setting is about what the business typed to the customer, not commands to
    the agent). A malformed one is not a run command: its error would be sent to the customer."""
    if not text or not text.lstrip().startswith("/"):
        return False
    try:
        command = parse(text)
    except ParseError:
        return False
    return command is not None and command.name in RUN_COMMANDS


def names_a_command(text: str | None) -> bool:
    """Whether ``text`` is a known command, well-formed or not: written to the agent, not to the
    customer (so the owner mistyping ``/goal`` on the business phone does not take the chat over)."""
    if not text or not text.lstrip().startswith("/"):
        return False
    try:
        return parse(text) is not None
    except ParseError:
        return True


def is_compact_request(request_id: str | None) -> bool:
    """Whether a run was requested by ``/compact`` (it summarizes, never answers)."""
    return bool(request_id and request_id.startswith(COMPACT_REQUEST_PREFIX))
