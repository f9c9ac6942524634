"""Prompt composition as a pipeline of context builders [002 "Composizione del prompt"].

The prompt is built in labeled layers by small builders run in order over a
:class:`PromptDraft`; the loop only receives the finished draft. This issue
ships identity, tool catalog, system prompt, persona, skills, run contract,
wake context, conversation history and the inbound messages. The next issue
adds memory (thread summary, long-term facts), slash commands (parsed from the
raw user text) and autonomy gating of the tool list as further builders — inserted in the list returned by
:func:`default_builders`, without touching the loop.

Rules kept here:

- the tool catalog layer is generated from the tools actually offered, so a
  prompt can never name a tool the run lacks;
- history is bounded by the version's message window, its token window and a
  50,000-character literal window; older messages stay reachable through the
  history tool, never silently lost;
- the transcript starts with a user turn and alternates, as every provider wants.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from services.runner.budget import estimate_tokens
from services.runner.providers.base import AssistantMessage, Message, SystemLayer, ToolSpec, UserMessage
from services.runner.subject import HistoryItem, RunSubject
from switchboard.tool_catalog import CONVERSATION_HISTORY, REQUEST_HUMAN_HANDOFF

LITERAL_HISTORY_WINDOW_CHARS = 50_000


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
    system: list[SystemLayer] = field(default_factory=list)
    history: list[Message] = field(default_factory=list)
    inbound: list[Message] = field(default_factory=list)

    def layer(self, label: str, text: str | None) -> None:
        if text and text.strip():
            self.system.append(SystemLayer(label, text.strip()))

    def freeze(self) -> PromptDraft:
        return PromptDraft(tuple(self.system), _alternating([*self.history, *self.inbound]), tuple(self.tools))


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
        draft.layer("Instructions", subject.version.system_prompt)


class PersonaLayer:
    name = "persona"

    async def build(self, subject: RunSubject, draft: DraftBuilder) -> None:
        draft.layer("Persona", subject.version.persona)


class SkillsLayer:
    name = "skills"

    async def build(self, subject: RunSubject, draft: DraftBuilder) -> None:
        if subject.version.skills:
            draft.layer("Skills", ", ".join(subject.version.skills))


class RunContractLayer:
    name = "run_contract"

    async def build(self, subject: RunSubject, draft: DraftBuilder) -> None:
        offered = {t.name for t in draft.tools}
        rules = [
            "You are answering a customer on WhatsApp. Your final text is sent to the customer as one message: "
            "keep it short, friendly and in the customer's language.",
            "Never invent facts about the business; if you do not know, say so.",
        ]
        if REQUEST_HUMAN_HANDOFF in offered:
            rules.append(
                f"If the customer asks for a person, is upset, or you cannot help, call {REQUEST_HUMAN_HANDOFF} "
                "with a short reason and an urgency (low, normal, high, urgent)."
            )
        if CONVERSATION_HISTORY in offered:
            rules.append(f"Older messages of this conversation are available through {CONVERSATION_HISTORY}.")
        draft.layer("Run contract", "\n".join(f"- {r}" for r in rules))


class WakeLayer:
    name = "wake"

    async def build(self, subject: RunSubject, draft: DraftBuilder) -> None:
        request = subject.request
        context = request.wake_context.model_dump(exclude_none=True)
        ids = ", ".join(f"{k}={v}" for k, v in context.items()) or "none"
        text = f"Wake reason: {request.wake_reason.value}. Context ids: {ids}."
        if request.attempt > 1:
            text += f" This is attempt {request.attempt}: a previous attempt was interrupted; answer from scratch."
        if subject.conversation and subject.conversation.contact_name:
            text += f" The customer's name is {subject.conversation.contact_name}."
        draft.layer("Wake context", text)


async def preloaded_history(subject: RunSubject, limit: int) -> list[HistoryItem]:
    """The messages loaded with the run's subject (``RunStore.claim``), newest first."""
    return list(subject.recent_messages[:limit])


class HistoryBuilder:
    """The recent conversation, bounded by the version's windows (see the module docstring)."""

    name = "history"

    def __init__(self, loader: HistoryLoader = preloaded_history) -> None:
        self._loader = loader

    async def build(self, subject: RunSubject, draft: DraftBuilder) -> None:
        window = subject.version.history_message_window
        if window <= 0 or subject.conversation is None:
            return
        answered = {m.message_id for m in subject.request.messages}
        items = [i for i in await self._loader(subject, window + len(answered)) if i.message_id not in answered]
        kept: list[HistoryItem] = []
        tokens = chars = 0
        for item in sorted(items, key=lambda i: i.occurred_at, reverse=True)[:window]:
            tokens += estimate_tokens(item.text)
            chars += len(item.text)
            if tokens > subject.version.history_token_window or chars > LITERAL_HISTORY_WINDOW_CHARS:
                break
            kept.append(item)
        draft.history = [
            UserMessage(i.text) if i.direction == "inbound" else AssistantMessage(i.text) for i in reversed(kept)
        ]


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
        HistoryBuilder(history),
        InboundBuilder(),
    ]


async def compose(subject: RunSubject, tools: Sequence[ToolSpec], builders: Sequence[ContextBuilder]) -> PromptDraft:
    draft = DraftBuilder(tools=list(tools))
    for builder in builders:
        await builder.build(subject, draft)
    return draft.freeze()


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
