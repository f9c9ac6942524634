"""PII pseudonymization: the one boundary between customer data and a model provider [000 §7-8].

Emails, phone numbers (E.164 and common local formats) and contact names are
replaced by stable per-run aliases (``<email_1>``, ``<phone_1>``,
``<contact_1>``) before any text reaches a provider, and resolved back to the
real values only where the outside world needs them:

- **into the model** — :meth:`Pseudonymizer.seal` turns a :class:`ModelRequest`
  into a :class:`SealedRequest`, the only request type ``AgentLoop`` hands a
  provider (``AgentLoop._call_model`` takes nothing else, and every loop owns a
  pseudonymizer). The whole request is sealed at every step — system layers,
  history, inbound messages, tool results, steering guidance, nudges — so a
  new source of text cannot bypass it;
- **tool results** — :class:`PiiInterceptor` pseudonymizes every outcome as soon
  as it exists (so the trace and the live events hold aliases too) and learns
  contact names from the CRM tools' JSON (objects with a ``name`` next to a
  ``contact_id`` / ``phone`` / ``email``);
- **out to tools** — :class:`PiiToolBox` resolves aliases in the arguments just
  before a call reaches the tool server (write tools act on real values; read
  tools need them to search); the server is inside our trust boundary;
- **out to the customer** — :meth:`Pseudonymizer.reveal` resolves the final
  text (and a handoff reason, read by the team) before it is recorded.

The trace, ``run_events`` and the stored prompt keep the aliases: they show
what the model saw, and hold no raw PII that a trace viewer could leak.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from services.runner.interceptors import CallContext
from services.runner.outcome import LoopOutcome
from services.runner.providers.base import (
    AssistantMessage,
    Message,
    ModelRequest,
    SystemLayer,
    ToolCallRequest,
    ToolOutcome,
    ToolResults,
    ToolSpec,
    UserMessage,
)
from services.runner.tools.base import ToolBox

EMAIL = "email"
PHONE = "phone"
CONTACT = "contact"

_EMAIL_RE = re.compile(r"(?<![\w.+\-])[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+(?![\w\-])")
# A leading "+" or "(" then 7-16 more digits with at most two separators (space, dot, dash,
# parentheses) between digits; not glued to a word, an id, a path or an alias.
_PHONE_RE = re.compile(r"(?<![\w+\-/.:<#])(?:\+|\()?\d(?:[ \t().\-]{0,2}\d){6,16}(?![\w\-/:>])")
_NOT_A_PHONE_RE = re.compile(r"\d{4}-\d{1,2}-\d{1,2}|\d{1,2}[/.\-]\d{1,2}[/.\-]\d{2,4}|\d{1,2}[:.]\d{2}")
_ALIAS_RE = re.compile(r"<(email|phone|contact)_(\d+)>")
_MIN_PHONE_DIGITS = 8
_MAX_PHONE_DIGITS = 15
# Keys of CRM JSON whose values are identities; values under id-like keys are never touched.
_EMAIL_KEYS = frozenset({"email", "email_address"})
_PHONE_KEYS = frozenset({"phone", "phone_number", "mobile"})
_NAME_KEYS = frozenset({"contact_name", "display_name", "full_name", "customer_name"})
_CONTACT_MARKERS = frozenset({"contact_id", *_EMAIL_KEYS, *_PHONE_KEYS})
# A word of a display name that is a number or an address, not a name; what may wrap a name's word.
_NOT_A_NAME_WORD = re.compile(r"[\d@]")
_NAME_PUNCTUATION = "()[]{}<>,;:!?\"'|*_~"
_NAME_PART_STOPWORDS = frozenset({"dos", "das", "del", "della", "van", "von", "der", "den", "los", "las", "the"})


def _phone_key(value: str) -> str:
    digits = re.sub(r"\D", "", value)
    return digits[2:] if digits.startswith("00") else digits


@dataclass
class _Table:
    """Real value ↔ alias for one kind; the first spelling seen is what an alias resolves to."""

    kind: str
    by_key: dict[str, str] = field(default_factory=dict)
    real: dict[str, str] = field(default_factory=dict)

    def alias(self, key: str, original: str) -> str:
        alias = self.by_key.get(key)
        if alias is None:
            alias = f"<{self.kind}_{len(self.real) + 1}>"
            self.by_key[key] = alias
            self.real[alias] = original
        return alias


class Pseudonymizer:
    """The alias table of one run. Pure and synchronous; create one per run."""

    def __init__(self, *, names: Iterable[str | None] = ()) -> None:
        self._emails = _Table(EMAIL)
        self._phones = _Table(PHONE)
        self._contacts = _Table(CONTACT)
        self._name_patterns: dict[str, str] = {}  # casefolded name or name part -> alias
        self._name_spellings: dict[str, str] = {}  # every spelling matched -> alias
        self._name_re: re.Pattern[str] | None = None
        self.generation = 0  # grows whenever something new is learned (memo invalidation)
        self._memo: dict[int, tuple[Message, Message]] = {}
        self._memo_generation = 0
        for name in names:
            if name:
                self.learn_name(name)

    # ------------------------------------------------------------------ learning

    def learn_name(self, name: str) -> str | None:
        """Register a contact name; its parts (3+ letters) map to the same alias.

        Words holding a digit or "@" are a number or an address — WhatsApp often shows one as the
        display name, alone or next to the name ("Maria Silva 2", "Bia @ Salão"): the patterns take
        those, and as name parts their digit groups would mask prices. The words around them are the
        name, and are learned (before 2026-12-05 such a name was skipped whole, and reached the model
        raw)."""
        clean = " ".join(name.split())
        if _ALIAS_RE.fullmatch(clean):
            return None
        words = (word.strip(_NAME_PUNCTUATION) for word in clean.split(" ") if not _NOT_A_NAME_WORD.search(word))
        name_only = " ".join(word for word in words if word)
        if len(name_only) < 2:
            return None
        alias = self._contacts.alias(name_only.casefold(), name_only)
        variants = [name_only, *[p for p in re.split(r"[\s\-]+", name_only) if len(p) >= 3]]
        for variant in variants:
            key = variant.casefold().strip(".,")
            if not key or key in _NAME_PART_STOPWORDS or key in self._name_patterns:
                continue
            self._name_patterns[key] = alias
            # Matched as written, lower-cased and case-folded: case folding changes the length of
            # some letters ("ß" -> "ss", "İ" -> "i̇"), and a pattern of one spelling misses the others.
            written = variant.strip(".,")
            for spelling in {key, written, written.lower()}:
                self._name_spellings[spelling] = alias
            self._name_re = None
            self.generation += 1
        return alias

    def _email(self, value: str) -> str:
        before = len(self._emails.real)
        alias = self._emails.alias(value.casefold(), value)
        self.generation += len(self._emails.real) - before
        return alias

    def _phone(self, value: str) -> str:
        key = _phone_key(value)
        core = key.lstrip("0")
        for known, alias in self._phones.by_key.items():
            # The same number with and without its country code or trunk prefix (8+ digits in common).
            other = known.lstrip("0")
            if min(len(core), len(other)) >= _MIN_PHONE_DIGITS and (other.endswith(core) or core.endswith(other)):
                return alias
        self.generation += 1
        return self._phones.alias(key, value.strip())

    # ------------------------------------------------------------------ text

    def text(self, value: str) -> str:
        """Free text with every email, phone number and known contact name aliased."""
        if not value:
            return value
        out = _EMAIL_RE.sub(lambda m: self._email(m.group(0)), value)
        out = _PHONE_RE.sub(self._phone_match, out)
        pattern = self._names()
        if pattern is not None:
            out = pattern.sub(self._name_alias, out)
        return out

    def _phone_match(self, match: re.Match[str]) -> str:
        found = match.group(0)
        digits = len(re.sub(r"\D", "", found))
        if not _MIN_PHONE_DIGITS <= digits <= _MAX_PHONE_DIGITS or _NOT_A_PHONE_RE.fullmatch(found.strip("()")):
            return found
        return self._phone(found)

    def _name_alias(self, match: re.Match[str]) -> str:
        found = match.group(0)
        alias = (
            self._name_spellings.get(found)
            or self._name_spellings.get(found.lower())
            or self._name_patterns.get(found.casefold())
        )
        if alias is None:  # matched case-insensitively under a spelling stored otherwise
            alias = next(a for s, a in self._name_spellings.items() if re.fullmatch(re.escape(s), found, re.I))
        return alias

    def _names(self) -> re.Pattern[str] | None:
        if self._name_re is None and self._name_spellings:
            alternatives = sorted(self._name_spellings, key=len, reverse=True)
            body = "|".join(re.escape(a) for a in alternatives)
            self._name_re = re.compile(rf"(?<![\w<])(?:{body})(?![\w>])", re.IGNORECASE)
        return self._name_re

    def tool_result(self, content: str) -> str:
        """A tool's result: JSON is walked (names learned from contact objects first), else free text."""
        try:
            decoded = json.loads(content)
        except ValueError:
            return self.text(content)
        if not isinstance(decoded, dict | list):
            return self.text(content)
        self._learn_contacts(decoded)
        return json.dumps(self._walk(decoded, None), ensure_ascii=False)

    def _learn_contacts(self, value: Any) -> None:
        if isinstance(value, list):
            for item in value:
                self._learn_contacts(item)
        elif isinstance(value, dict):
            has_marker = any(k in _CONTACT_MARKERS for k in value)
            for key, item in value.items():
                if isinstance(item, str) and (key in _NAME_KEYS or (key == "name" and has_marker)):
                    self.learn_name(item)
                else:
                    self._learn_contacts(item)

    def _walk(self, value: Any, key: str | None) -> Any:
        if isinstance(value, dict):
            return {k: self._walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self._walk(v, key) for v in value]
        if not isinstance(value, str | int) or isinstance(value, bool) or key is None:
            return self.text(value) if isinstance(value, str) else value
        if key == "id" or key.endswith("_id"):
            return value
        if key in _EMAIL_KEYS and isinstance(value, str) and value.strip():
            return self._email(value.strip())
        if key in _PHONE_KEYS and str(value).strip():
            return self._phone(str(value))
        return self.text(value) if isinstance(value, str) else value

    # ------------------------------------------------------------------ back to real values

    def reveal(self, value: str) -> str:
        """Aliases back to the real values (unknown aliases stay as written)."""
        if not value or "<" not in value:
            return value
        return _ALIAS_RE.sub(self._real, value)

    def _real(self, match: re.Match[str]) -> str:
        table = {EMAIL: self._emails, PHONE: self._phones, CONTACT: self._contacts}[match.group(1)]
        return table.real.get(match.group(0), match.group(0))

    def reveal_arguments(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.reveal(value)
        if isinstance(value, Mapping):
            return {k: self.reveal_arguments(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.reveal_arguments(v) for v in value]
        return value

    def reveal_call(self, call: ToolCallRequest) -> ToolCallRequest:
        if call.error is not None:
            return call
        arguments = self.reveal_arguments(call.arguments)
        if arguments == dict(call.arguments):
            return call
        return ToolCallRequest.parse(call.id, call.name, arguments)

    def reveal_outcome(self, outcome: LoopOutcome) -> LoopOutcome:
        """The customer-facing parts of an outcome with real values: final text, handoff reason."""
        final_text = self.reveal(outcome.final_text) if outcome.final_text else outcome.final_text
        handoff = outcome.handoff
        if handoff is not None:
            handoff = replace(handoff, reason=self.reveal(handoff.reason))
        return replace(outcome, final_text=final_text, handoff=handoff)

    # ------------------------------------------------------------------ into the model

    def seal(self, request: ModelRequest) -> SealedRequest:
        """The request a provider may receive: every text in it pseudonymized."""
        if self._memo_generation != self.generation:
            self._memo.clear()
            self._memo_generation = self.generation
        messages = tuple(self._message(m) for m in request.messages)
        system = tuple(SystemLayer(layer.label, self.text(layer.text)) for layer in request.system)
        return SealedRequest(
            model=request.model,
            system=system,
            messages=messages,
            tools=request.tools,
            max_output_tokens=request.max_output_tokens,
            reasoning_tokens=request.reasoning_tokens,
            seal=_SEAL,
        )

    def layers(self, layers: Sequence[SystemLayer]) -> tuple[SystemLayer, ...]:
        return tuple(SystemLayer(layer.label, self.text(layer.text)) for layer in layers)

    def messages(self, messages: Sequence[Message]) -> tuple[Message, ...]:
        return tuple(self._message(m) for m in messages)

    def _message(self, message: Message) -> Message:
        cached = self._memo.get(id(message))
        if cached is not None and cached[0] is message:
            return cached[1]
        sealed: Message
        if isinstance(message, UserMessage):
            sealed = UserMessage(self.text(message.text))
        elif isinstance(message, ToolResults):
            sealed = ToolResults(
                tuple(replace(r, content=self.text(r.content)) for r in message.results),
                notes=tuple(self.text(n) for n in message.notes),
            )
        else:
            sealed = self._assistant(message)
        self._memo[id(message)] = (message, sealed)
        return sealed

    def _assistant(self, message: AssistantMessage) -> AssistantMessage:
        text = self.text(message.text)
        calls = tuple(self._call(c) for c in message.tool_calls)
        if text == message.text and all(a is b for a, b in zip(calls, message.tool_calls, strict=True)):
            return message
        # The model's own words held PII it never got from us; the provider's verbatim copy of the
        # turn would carry it, so it is dropped and the adapter renders the neutral fields instead.
        return replace(message, text=text, tool_calls=calls, provider_state=None)

    def _call(self, call: ToolCallRequest) -> ToolCallRequest:
        masked = self.text(call.arguments_json)
        if masked == call.arguments_json:
            return call
        return ToolCallRequest.parse(call.id, call.name, masked)


_SEAL = object()


@dataclass(frozen=True, slots=True)
class SealedRequest(ModelRequest):
    """A :class:`ModelRequest` made by :meth:`Pseudonymizer.seal` — the only kind the loop sends."""

    seal: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.seal is not _SEAL:
            raise TypeError("a SealedRequest is made only by Pseudonymizer.seal")


class PiiInterceptor:
    """Pseudonymizes every tool outcome as soon as it exists (the trace and events see aliases)."""

    def __init__(self, pii: Pseudonymizer) -> None:
        self._pii = pii

    async def before_call(self, ctx: CallContext, call: ToolCallRequest) -> ToolOutcome | None:
        return None

    async def after_call(self, ctx: CallContext, call: ToolCallRequest, outcome: ToolOutcome) -> ToolOutcome:
        content = self._pii.tool_result(outcome.content)
        return outcome if content == outcome.content else replace(outcome, content=content)


class PiiToolBox:
    """Resolves aliases in a call's arguments just before it reaches the tool server."""

    def __init__(self, inner: ToolBox, pii: Pseudonymizer) -> None:
        self._inner = inner
        self._pii = pii

    async def specs(self) -> tuple[ToolSpec, ...]:
        return await self._inner.specs()

    async def call(self, call: ToolCallRequest, *, timeout_s: float) -> ToolOutcome:
        return await self._inner.call(self._pii.reveal_call(call), timeout_s=timeout_s)

    async def aclose(self) -> None:
        await self._inner.aclose()
