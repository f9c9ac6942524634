"""Prompt composition as a pipeline of context builders [002 "Composizione del prompt"].

The prompt is built in labeled layers by small builders run in order over a
:class:`PromptDraft`; the loop only receives the finished draft. The layers, in
this fixed order (docs/agent-context.md):

1. **Identity** — agent id, name, org id, and the instruction to pass exactly
   those ids to org-scoped tools;
2. **Tools** — generated from the tools the run is really offered;
3. **System prompt** — the version's override;
4. **Persona and team brief**;
5. **Skills** — the names on the version;
6. **Run contract** — the rules of the current :class:`RunMode`;
7. **Wake context** — the wake reason and its ids;
8. **Memory** — the thread summary (and, later, retrieved long-term facts);
9. **Conversation** — who the customer is and what the transcript holds; the
   transcript itself (history, then the inbound messages) follows as messages.

Rules kept here:

- a prompt can never name a tool the run lacks: the tool catalog is generated
  from the offered tools, and a final pass (:func:`scrub_unoffered_tools`)
  rewrites any known tool name that is not offered in every layer — including
  the version's own free text;
- history is bounded by the version's message window, its token window and a
  50,000-character literal window; older messages stay reachable through the
  history tool, never silently lost;
- the transcript starts with a user turn and alternates, as every provider wants.

Composition reads nothing but the run's subject and its history loader, so it
is a pure function of them, unit-tested without a database.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from services.runner.budget import estimate_tokens
from services.runner.providers.base import (
    AssistantMessage,
    Message,
    SystemLayer,
    ToolResults,
    ToolSpec,
    UserMessage,
)
from services.runner.subject import ConversationInfo, HistoryItem, RunSubject
from switchboard.tool_catalog import CONVERSATION_HISTORY, REQUEST_HUMAN_HANDOFF, TOOL_KINDS

LITERAL_HISTORY_WINDOW_CHARS = 50_000
# Every tool name a layer could mention; those not offered are rewritten by the final pass. The local
# ``finish`` tool is left out on purpose: it is an ordinary English word in a version's instructions.
KNOWN_TOOL_NAMES = frozenset(TOOL_KINDS)
UNAVAILABLE_TOOL = "(a tool not available in this run)"


class RunMode(StrEnum):
    """What kind of turn this is; each mode has its own run contract [002 "Contratto di esecuzione"]."""

    REPLY = "reply"
    # Issue 6 item 4, slash commands (services/runner/turns.py, docs/agent-context.md).
    PLAN = "plan"
    GOAL = "goal"


_MODE_RULES: dict[RunMode, tuple[str, ...]] = {
    RunMode.REPLY: (
        "You are answering a customer on WhatsApp. Your final text is sent to the customer as one message: "
        "keep it short, friendly and in the customer's language.",
        "Write it as WhatsApp shows it: plain text, *single asterisks* for bold, - for lists, a bare URL "
        "for a link; no headings, tables or other Markdown.",
        "Never invent facts about the business; if you do not know, say so.",
        "Values written like <email_1>, <phone_1> or <contact_1> stand for the customer's real data: use them "
        "as they are, in tools and in your answer; they are filled in before anything is sent.",
    ),
    # Slash commands (issue 6 item 4): the local tools named here are always offered in their mode.
    RunMode.PLAN: (
        "Plan mode: do not act. You may only read (the tools offered are read-only) and then propose a plan.",
        "Deliver the plan by calling submit_plan with numbered, concrete steps; the plan is what is sent. "
        "A run that never calls submit_plan produces nothing.",
        "Values written like <email_1>, <phone_1> or <contact_1> stand for real data: use them as they are.",
    ),
    RunMode.GOAL: (
        "Autonomous work: pursue the goal in the Directive layer with the tools offered, without waiting for "
        "the customer. This run is one segment of the goal with its own cost budget; the goal continues in a "
        "next segment until it is done or its budget is spent.",
        "When the goal is achieved, call goal_complete with a short report. Otherwise end the segment with a "
        "short progress note: it is sent to the conversation.",
        "Values written like <email_1>, <phone_1> or <contact_1> stand for real data: use them as they are.",
    ),
}


@dataclass(frozen=True, slots=True)
class PromptDraft:
    """What the loop starts from."""

    system: tuple[SystemLayer, ...]
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]


@dataclass
class DraftBuilder:
    """The mutable draft builders work on."""

    tools: list[ToolSpec]
    mode: RunMode = RunMode.REPLY
    system: list[SystemLayer] = field(default_factory=list)
    history: list[Message] = field(default_factory=list)
    inbound: list[Message] = field(default_factory=list)

    def layer(self, label: str, text: str | None) -> None:
        if text and text.strip():
            self.system.append(SystemLayer(label, text.strip()))

    @property
    def offered(self) -> set[str]:
        return {t.name for t in self.tools}

    def freeze(self) -> PromptDraft:
        system = scrub_unoffered_tools(self.system, self.offered)
        return PromptDraft(system, _alternating([*self.history, *self.inbound]), tuple(self.tools))


class ContextBuilder(Protocol):
    name: str

    async def build(self, subject: RunSubject, draft: DraftBuilder) -> None: ...


HistoryLoader = Callable[[RunSubject, int], Awaitable[list[HistoryItem]]]


class IdentityLayer:
    name = "identity"

    async def build(self, subject: RunSubject, draft: DraftBuilder) -> None:
        request = subject.request
        draft.layer(
            "Identity",
            f"You are the agent {subject.agent_name!r} (agent id {request.agent_id}) of the organization "
            f"{request.org_id}. When a tool asks for an organization or agent id, pass exactly these ids.",
        )


class ToolCatalogLayer:
    name = "tool_catalog"

    async def build(self, subject: RunSubject, draft: DraftBuilder) -> None:
        if not draft.tools:
            draft.layer("Tools", "You have no tools in this run. Answer with text only.")
            return
        lines = [f"- {t.name}: {t.description.splitlines()[0] if t.description else ''}" for t in draft.tools]
        draft.layer("Tools", "You may call only these tools:\n" + "\n".join(lines))


class SystemPromptLayer:
    name = "system_prompt"

    async def build(self, subject: RunSubject, draft: DraftBuilder) -> None:
        draft.layer("System prompt", subject.version.system_prompt)


class PersonaLayer:
    name = "persona"

    async def build(self, subject: RunSubject, draft: DraftBuilder) -> None:
        draft.layer("Persona and team brief", subject.version.persona)


class SkillsLayer:
    name = "skills"

    async def build(self, subject: RunSubject, draft: DraftBuilder) -> None:
        if subject.version.skills:
            draft.layer("Skills", ", ".join(subject.version.skills))


class RunContractLayer:
    name = "run_contract"

    async def build(self, subject: RunSubject, draft: DraftBuilder) -> None:
        offered = draft.offered
        rules = list(_MODE_RULES[draft.mode])
        if REQUEST_HUMAN_HANDOFF in offered:
            rules.append(
                f"If the customer asks for a person, is upset, or you cannot help, call {REQUEST_HUMAN_HANDOFF} "
                "with a short reason and an urgency (low, normal, high, urgent)."
            )
        if CONVERSATION_HISTORY in offered:
            rules.append(f"Older messages of this conversation are available through {CONVERSATION_HISTORY}.")
        draft.layer("Run contract", f"Mode: {draft.mode.value}.\n" + "\n".join(f"- {r}" for r in rules))


class WakeLayer:
    name = "wake"

    async def build(self, subject: RunSubject, draft: DraftBuilder) -> None:
        request = subject.request
        context = request.wake_context.model_dump(exclude_none=True)
        ids = ", ".join(f"{k}={v}" for k, v in context.items()) or "none"
        text = f"Wake reason: {request.wake_reason.value}. Context ids: {ids}."
        if request.attempt > 1:
            text += f" This is attempt {request.attempt}: a previous attempt was interrupted; answer from scratch."
        draft.layer("Wake context", text)


class MemoryLayer:
    """The thread summary kept for a conversation that outgrew its window (long-term facts: a later builder)."""

    name = "memory"

    async def build(self, subject: RunSubject, draft: DraftBuilder) -> None:
        summary = subject.conversation.summary if subject.conversation else None
        if summary and summary.strip():
            draft.layer("Memory", f"Summary of the earlier conversation:\n{summary.strip()}")


async def preloaded_history(subject: RunSubject, limit: int) -> list[HistoryItem]:
    """The messages loaded with the run's subject (``RunStore.claim``), newest first."""
    return list(subject.recent_messages[:limit])


@dataclass(frozen=True, slots=True)
class HistoryWindow:
    """The recent messages kept (oldest first) and whether older ones exist beyond the window."""

    kept: tuple[HistoryItem, ...]
    older_exist: bool


def history_window(
    items: Sequence[HistoryItem], *, messages: int, tokens: int, chars: int = LITERAL_HISTORY_WINDOW_CHARS
) -> HistoryWindow:
    """The newest messages within all three windows; stops at the first message that does not fit,
    so what is kept is always a contiguous recent tail."""
    newest_first = sorted(items, key=lambda i: i.occurred_at, reverse=True)
    kept: list[HistoryItem] = []
    used_tokens = used_chars = 0
    for item in newest_first[:messages]:
        used_tokens += estimate_tokens(item.text)
        used_chars += len(item.text)
        if used_tokens > tokens or used_chars > chars:
            break
        kept.append(item)
    return HistoryWindow(tuple(reversed(kept)), older_exist=len(kept) < len(newest_first))


class HistoryBuilder:
    """The conversation context: a labeled layer about the conversation, then the recent transcript."""

    name = "history"

    def __init__(self, loader: HistoryLoader = preloaded_history) -> None:
        self._loader = loader

    async def build(self, subject: RunSubject, draft: DraftBuilder) -> None:
        conversation = subject.conversation
        if conversation is None:
            return
        window = subject.version.history_message_window
        answered = {m.message_id for m in subject.request.messages}
        kept = HistoryWindow((), older_exist=True)
        if window > 0:
            # One more than the window: whether older messages exist is then known, not guessed.
            loaded = await self._loader(subject, window + len(answered) + 1)
            items = [i for i in loaded if i.message_id not in answered]
            uncovered = _not_summarized(items, conversation)
            kept = history_window(uncovered, messages=window, tokens=subject.version.history_token_window)
            if len(uncovered) < len(items):  # the summary stands for them, and they can be fetched
                kept = HistoryWindow(kept.kept, older_exist=True)
        draft.history = [
            UserMessage(i.text) if i.direction == "inbound" else AssistantMessage(i.text) for i in kept.kept
        ]
        lines = []
        if conversation.contact_name:
            lines.append(f"The customer's name is {conversation.contact_name}.")
        lines.append(f"The transcript below holds the latest {len(kept.kept)} earlier message(s) and the new one(s).")
        if kept.older_exist:
            lines.append(
                f"Older messages are not shown; fetch them with {CONVERSATION_HISTORY} when you need them."
                if CONVERSATION_HISTORY in draft.offered
                else "Older messages are not shown and cannot be fetched in this run."
            )
        draft.layer("Conversation", " ".join(lines))


def _not_summarized(items: Sequence[HistoryItem], conversation: ConversationInfo) -> list[HistoryItem]:
    """The messages the thread summary does not cover. The background job only folds in messages
    older than the window, but ``/compact`` folds in every one (docs/agent-context.md): without this
    the next prompt said the same recent turns twice, once in the Memory layer and once verbatim."""
    through = conversation.summary_through
    if through is None or not (conversation.summary or "").strip():
        return list(items)
    return [item for item in items if (item.occurred_at, item.message_id) > through]


class InboundBuilder:
    name = "inbound"

    async def build(self, subject: RunSubject, draft: DraftBuilder) -> None:
        text = subject.inbound_text
        if not text:
            text = f"(No new customer message: you were woken for {subject.request.wake_reason.value}.)"
        draft.inbound = [UserMessage(text)]


def default_builders(history: HistoryLoader = preloaded_history) -> list[ContextBuilder]:
    return [
        IdentityLayer(),
        ToolCatalogLayer(),
        SystemPromptLayer(),
        PersonaLayer(),
        SkillsLayer(),
        RunContractLayer(),
        WakeLayer(),
        MemoryLayer(),
        HistoryBuilder(history),
        InboundBuilder(),
    ]


async def compose(
    subject: RunSubject,
    tools: Sequence[ToolSpec],
    builders: Sequence[ContextBuilder],
    *,
    mode: RunMode = RunMode.REPLY,
) -> PromptDraft:
    draft = DraftBuilder(tools=list(tools), mode=mode)
    for builder in builders:
        await builder.build(subject, draft)
    return draft.freeze()


def scrub_unoffered_tools(layers: Sequence[SystemLayer], offered: set[str]) -> tuple[SystemLayer, ...]:
    """Rewrite every known tool name that is not offered, so no layer can point the model at it."""
    missing = sorted(KNOWN_TOOL_NAMES - offered, key=len, reverse=True)
    if not missing:
        return tuple(layers)
    pattern = re.compile(r"(?<![\w])(?:" + "|".join(re.escape(n) for n in missing) + r")(?![\w])")
    return tuple(SystemLayer(layer.label, pattern.sub(UNAVAILABLE_TOOL, layer.text)) for layer in layers)


def prompt_record(
    system: Sequence[SystemLayer], messages: Sequence[Message], tools: Sequence[ToolSpec]
) -> dict[str, Any]:
    """The composed prompt as stored with the run (``ai_agent_runs.prompt``): what the model saw first."""
    return {
        "layers": [{"label": layer.label, "text": layer.text} for layer in system],
        "messages": [_message_record(m) for m in messages],
        "tools": [t.name for t in tools],
    }


def _message_record(message: Message) -> dict[str, Any]:
    if isinstance(message, UserMessage):
        return {"role": "user", "text": message.text}
    if isinstance(message, AssistantMessage):
        return {"role": "assistant", "text": message.text}
    if isinstance(message, ToolResults):
        return {"role": "tool", "text": "\n".join(r.content for r in message.results)}
    raise TypeError(type(message).__name__)


def _alternating(messages: list[Message]) -> tuple[Message, ...]:
    """Merge consecutive same-role text turns and drop a leading assistant turn."""
    out: list[Message] = []
    for message in messages:
        if not out and isinstance(message, AssistantMessage):
            continue
        previous = out[-1] if out else None
        if isinstance(message, UserMessage) and isinstance(previous, UserMessage):
            out[-1] = UserMessage(f"{previous.text}\n{message.text}")
        elif (
            isinstance(message, AssistantMessage)
            and isinstance(previous, AssistantMessage)
            and not previous.tool_calls
            and not message.tool_calls
        ):
            out[-1] = AssistantMessage(f"{previous.text}\n{message.text}")
        else:
            out.append(message)
    return tuple(out)
