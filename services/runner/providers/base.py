"""The one interface every model provider implements, and the neutral conversation it speaks.

The loop never sees an SDK type: it builds a :class:`ModelRequest` (system
layers, a transcript of :data:`Message` items, tool specs, an output cap) and
gets a :class:`ModelResponse` (text, tool calls, usage, why it stopped). Each
adapter translates both ways with its provider's official SDK and maps the
SDK's errors onto :class:`ProviderError`, whose message is always ours — a
provider's own error text can echo part of a key, so it never travels on.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import ModuleType
from typing import Any, ClassVar
from uuid import UUID


class StopReason(StrEnum):
    END_TURN = "end_turn"
    TOOL_USE = "tool_use"
    MAX_TOKENS = "max_tokens"
    # The provider withheld the answer: a refusal, a safety or content filter, a blocked prompt.
    # Any text that came with it is not an answer to send (the loop aborts the run).
    REFUSED = "refused"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as offered to the model (schema from the tool server)."""

    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """A tool call asked for by the model. ``error`` is set when its arguments were not a JSON object."""

    id: str
    name: str
    arguments: Mapping[str, Any]
    arguments_json: str
    error: str | None = None

    @staticmethod
    def parse(call_id: str, name: str, raw: str | Mapping[str, Any] | None) -> ToolCallRequest:
        """From raw arguments (a JSON string or an already decoded mapping)."""
        if raw is None or raw == "":
            return ToolCallRequest(call_id, name, {}, "{}")
        if isinstance(raw, Mapping):
            return ToolCallRequest(call_id, name, dict(raw), json.dumps(raw, ensure_ascii=False, sort_keys=True))
        try:
            decoded = json.loads(raw)
        except ValueError:
            return ToolCallRequest(call_id, name, {}, raw, error="arguments are not valid JSON")
        if not isinstance(decoded, dict):
            return ToolCallRequest(call_id, name, {}, raw, error="arguments must be a JSON object")
        return ToolCallRequest(call_id, name, decoded, json.dumps(decoded, ensure_ascii=False, sort_keys=True))

    @property
    def signature(self) -> str:
        """Name plus canonical arguments: what "identical calls" compares."""
        return f"{self.name}:{self.arguments_json}"


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """The result of one tool call, as the model will see it."""

    call_id: str
    name: str
    content: str
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class UserMessage:
    text: str


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    """What the model said. ``provider_state`` is the provider's own rendering of the turn
    (content blocks, thought signatures) so it can be sent back verbatim."""

    text: str
    tool_calls: tuple[ToolCallRequest, ...] = ()
    provider: str | None = None
    provider_state: Any = None


@dataclass(frozen=True, slots=True)
class ToolResults:
    """The results of every tool call of the previous assistant turn, plus notes for the model
    (steering guidance, loop nudges) delivered at the same turn boundary."""

    results: tuple[ToolOutcome, ...]
    notes: tuple[str, ...] = ()


Message = UserMessage | AssistantMessage | ToolResults


@dataclass(frozen=True, slots=True)
class SystemLayer:
    """One labeled section of the system prompt [002 "Composizione del prompt"]."""

    label: str
    text: str

    def render(self) -> str:
        return f"## {self.label}\n{self.text.strip()}"


def render_system(layers: tuple[SystemLayer, ...] | list[SystemLayer]) -> str:
    return "\n\n".join(layer.render() for layer in layers if layer.text.strip())


@dataclass(frozen=True, slots=True)
class ModelRequest:
    model: str
    system: tuple[SystemLayer, ...]
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]
    max_output_tokens: int
    # How many of ``max_output_tokens`` a reasoning model may spend thinking; 0: not a reasoning
    # model (no reasoning parameter is sent).
    reasoning_tokens: int = 0


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Tokens of one call or a sum. ``input_tokens`` excludes the cached ones, so the four add
    up to what the provider counted (docs/contracts.md "Cost and usage units")."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )

    @property
    def all_input(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def total(self) -> int:
        return self.all_input + self.output_tokens


@dataclass(frozen=True, slots=True)
class ModelResponse:
    text: str
    tool_calls: tuple[ToolCallRequest, ...]
    usage: TokenUsage
    stop_reason: StopReason
    thinking: str = ""
    provider_state: Any = None


class CredentialSource(StrEnum):
    """Where the key came from, in the fixed resolution order [002 "Identità e credenziali"]."""

    VERSION = "version"
    ORG_DEFAULT = "org_default"
    PLATFORM = "platform"
    NONE = "none"


@dataclass(frozen=True)
class ProviderAccess:
    """How to reach a provider for one run. ``api_key`` is plaintext: it lives only as long
    as the run, is never logged (``repr`` hides it) and never put in an event or trace."""

    source: CredentialSource
    base_url: str | None
    credential_id: UUID | None = None
    api_key: str = field(default="", repr=False)
    # The opened sealing's IV (``OpenedCredential.sealed_iv``): a rejection is recorded on that key only.
    credential_iv: bytes | None = None


class ProviderErrorKind(StrEnum):
    AUTH = "auth"
    RATE_LIMITED = "rate_limited"
    # The account's credit or quota is used up (OpenAI ``insufficient_quota``, sent as a 429): not
    # a moment's rate limit — retried, it failed as "upstream transient" and the owner never learnt
    # that billing needs them.
    QUOTA = "quota"
    # 403: the key is valid but may not do this (a model the workspace has no access to, a region):
    # the key is not "invalid or revoked", and a run's 403 must not mark it so.
    FORBIDDEN = "forbidden"
    SERVER = "server"
    TIMEOUT = "timeout"
    CONNECTION = "connection"
    BAD_REQUEST = "bad_request"
    OTHER = "other"


_RETRYABLE = frozenset(
    {ProviderErrorKind.RATE_LIMITED, ProviderErrorKind.SERVER, ProviderErrorKind.TIMEOUT, ProviderErrorKind.CONNECTION}
)
_CODES = {
    ProviderErrorKind.AUTH: "provider_auth_invalid",
    ProviderErrorKind.RATE_LIMITED: "provider_rate_limited",
    ProviderErrorKind.QUOTA: "provider_quota_exceeded",
    ProviderErrorKind.FORBIDDEN: "provider_forbidden",
    ProviderErrorKind.SERVER: "provider_server_error",
    ProviderErrorKind.TIMEOUT: "provider_timeout",
    ProviderErrorKind.CONNECTION: "provider_unreachable",
    ProviderErrorKind.BAD_REQUEST: "provider_bad_request",
    ProviderErrorKind.OTHER: "provider_error",
}


class ProviderError(Exception):
    """A failed model call, classified. The message is generated here, never the provider's text."""

    def __init__(
        self, kind: ProviderErrorKind, *, provider: str, status: int | None = None, retry_after_s: float | None = None
    ) -> None:
        self.kind = kind
        self.provider = provider
        self.status = status
        self.retry_after_s = retry_after_s
        detail = f" (HTTP {status})" if status else ""
        super().__init__(f"{provider} call failed: {kind.value}{detail}")

    @property
    def retryable(self) -> bool:
        return self.kind in _RETRYABLE

    @property
    def code(self) -> str:
        return _CODES[self.kind]


def kind_for_status(status: int) -> ProviderErrorKind:
    if status == 401:
        return ProviderErrorKind.AUTH
    if status == 403:
        return ProviderErrorKind.FORBIDDEN
    if status == 429:
        return ProviderErrorKind.RATE_LIMITED
    if status == 408:
        return ProviderErrorKind.TIMEOUT
    if status >= 500:
        return ProviderErrorKind.SERVER
    if 400 <= status < 500:
        return ProviderErrorKind.BAD_REQUEST
    return ProviderErrorKind.OTHER


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """The wait a provider asks for, in seconds: ``retry-after-ms`` (OpenAI's, finer) or
    ``retry-after``, when a number."""
    if not headers:
        return None
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) / scale)
        except ValueError:
            continue
    return None


def map_sdk_error(exc: Exception, provider: str, sdk: ModuleType) -> ProviderError:
    """Our error for an exception of an SDK generated in the Anthropic/OpenAI style.

    Both official SDKs expose the same ``APITimeoutError``, ``APIConnectionError`` and
    ``APIStatusError`` classes, so one mapping serves both (Google's SDK differs).
    """
    if isinstance(exc, sdk.APITimeoutError):
        return ProviderError(ProviderErrorKind.TIMEOUT, provider=provider)
    if isinstance(exc, sdk.APIConnectionError):
        return ProviderError(ProviderErrorKind.CONNECTION, provider=provider)
    if isinstance(exc, sdk.APIStatusError):
        status = int(exc.status_code)
        kind = kind_for_status(status)
        if kind is ProviderErrorKind.RATE_LIMITED and "insufficient_quota" in (
            getattr(exc, "code", None),
            getattr(exc, "type", None),
        ):
            kind = ProviderErrorKind.QUOTA
        return ProviderError(
            kind,
            provider=provider,
            status=status,
            retry_after_s=retry_after_seconds(exc.response.headers),
        )
    return ProviderError(ProviderErrorKind.OTHER, provider=provider)


class ModelProvider(ABC):
    """One model provider. Subclasses are registered in ``services.runner.providers``."""

    name: ClassVar[str]
    # False only for the built-in demo model: it needs no key and is not an LLM.
    requires_key: ClassVar[bool] = True
    is_llm: ClassVar[bool] = True

    @abstractmethod
    async def complete(self, request: ModelRequest, access: ProviderAccess, *, timeout_s: float) -> ModelResponse:
        """One model call, no retries (the loop retries). Raises :class:`ProviderError`."""

    async def complete_structured(
        self, request: ModelRequest, access: ProviderAccess, *, timeout_s: float
    ) -> ModelResponse:
        """Structured output as a tool-shaped answer (issue 6, ``services.runner.classification``): the
        request offers exactly one tool whose input schema is the wanted JSON, and the answer must call
        it. Adapters force that tool choice; this default only asks (the prompt says to call it)."""
        return await self.complete(request, access, timeout_s=timeout_s)

    async def aclose(self) -> None:  # noqa: B027 - optional hook, most adapters keep a pool
        """Release shared connections at shutdown."""
