"""Slash commands inside a run [002 "I comandi slash"]: what the runner does before any model call.

A known command written wrongly (``/goal --budget abc``, ``/todo`` without text)
is answered at once with the parser's message — a clear reply, never a crash, a
silent drop or a model guessing what was meant. The run completes with that
reply as its final text (the notifier sends it like any answer) and no model
call; the parser's stable code is in the run's summary.

Well-formed commands are acted upon by ``services.runner.turns`` (``/plan``, ``/goal``,
``/loop``, skills) and ``services.runner.compact`` (``/compact``); docs/agent-context.md.
"""

from __future__ import annotations

from services.runner.outcome import LoopOutcome, OutcomeKind
from services.runner.subject import RunSubject
from switchboard.slash_commands import ParseError, parse

# Commands anyone in the chat may write (handled at ingest); the others are the business's.
_ANYONE_CODES = ("slash_todo_",)


def malformed_command_reply(subject: RunSubject) -> LoopOutcome | None:
    """The run's outcome when its inbound text is a malformed known command; None otherwise.

    A customer's malformed ``/goal`` is plain text (customers cannot command the agent:
    ``RunSubject.command_text``); a malformed ``/todo`` — which anyone may write — is answered."""
    text = subject.inbound_text
    if not text.lstrip().startswith("/"):
        return None
    try:
        parse(text, skills=subject.version.skills)
    except ParseError as exc:
        if subject.command_text is None and not exc.code.startswith(_ANYONE_CODES):
            return None
        return LoopOutcome(
            OutcomeKind.ANSWERED,
            final_text=exc.message,
            summary=f"Answered a malformed slash command ({exc.code}) without calling the model.",
        )
    return None
