"""Anthropic Messages API through the official ``anthropic`` SDK.

The system prompt is sent as one text block marked ``cache_control: ephemeral``:
tools and system come first in Anthropic's cache prefix, so every step of a run
after the first (and every run of the same version within the cache TTL) reads
them from the prompt cache; the usage then reports ``cache_read_input_tokens``.
"""

from __future__ import annotations

from typing import Any

import anthropic

from services.runner.providers.base import (
    AssistantMessage,
    Message,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    ProviderAccess,
    ProviderError,
    StopReason,
    TokenUsage,
    ToolCallRequest,
    UserMessage,
    map_sdk_error,
    render_system,
)

_STOP = {
    "end_turn": StopReason.END_TURN,
    "tool_use": StopReason.TOOL_USE,
    "max_tokens": StopReason.MAX_TOKENS,
    # The context window filled while answering: cut off like an answer at its cap.
    "model_context_window_exceeded": StopReason.MAX_TOKENS,
    "refusal": StopReason.REFUSED,
}


def _assistant_blocks(message: AssistantMessage) -> list[dict[str, Any]]:
    if message.provider == AnthropicProvider.name and isinstance(message.provider_state, list):
        return list(message.provider_state)
    blocks: list[dict[str, Any]] = []
    if message.text:
        blocks.append({"type": "text", "text": message.text})
    blocks.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": dict(call.arguments)}
        for call in message.tool_calls
    )
    return blocks


def to_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """The neutral transcript as Messages API params."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, UserMessage):
            out.append({"role": "user", "content": message.text})
        elif isinstance(message, AssistantMessage):
            out.append({"role": "assistant", "content": _assistant_blocks(message)})
        else:
            content: list[dict[str, Any]] = [
                {"type": "tool_result", "tool_use_id": r.call_id, "content": r.content, "is_error": r.is_error}
                for r in message.results
            ]
            content.extend({"type": "text", "text": note} for note in message.notes)
            out.append({"role": "user", "content": content})
    return out


def _block_state(block: Any) -> dict[str, Any] | None:
    """The block as a request param (only the fields the API accepts back)."""
    kind = getattr(block, "type", None)
    if kind == "text":
        return {"type": "text", "text": block.text}
    if kind == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if kind == "thinking":
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.data}
    return None


def from_response(response: Any) -> ModelResponse:
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[ToolCallRequest] = []
    state: list[dict[str, Any]] = []
    for block in response.content:
        kind = getattr(block, "type", None)
        if kind == "text":
            texts.append(block.text)
        elif kind == "thinking":
            thinking.append(block.thinking)
        elif kind == "tool_use":
            calls.append(ToolCallRequest.parse(block.id, block.name, block.input))
        param = _block_state(block)
        if param is not None:
            state.append(param)
    usage = response.usage
    return ModelResponse(
        text="".join(texts),
        tool_calls=tuple(calls),
        usage=TokenUsage(
            input_tokens=usage.input_tokens or 0,
            output_tokens=usage.output_tokens or 0,
            cache_read_tokens=getattr(usage, "cache_read_input_tokens", None) or 0,
            cache_write_tokens=getattr(usage, "cache_creation_input_tokens", None) or 0,
        ),
        stop_reason=_STOP.get(response.stop_reason or "", StopReason.OTHER),
        thinking="".join(thinking),
        provider_state=state,
    )


def map_error(exc: Exception, provider: str) -> ProviderError:
    return map_sdk_error(exc, provider, anthropic)


class AnthropicProvider(ModelProvider):
    name = "anthropic"

    def __init__(self, *, default_base_url: str | None = None) -> None:
        self._default_base_url = default_base_url
        self._http: Any = None

    def _http_client(self) -> Any:
        # One connection pool for every run; each run's SDK client carries its own key.
        if self._http is None:
            self._http = anthropic.DefaultAsyncHttpxClient()
        return self._http

    async def complete(
        self, request: ModelRequest, access: ProviderAccess, *, timeout_s: float, force_tool: str | None = None
    ) -> ModelResponse:
        client = anthropic.AsyncAnthropic(
            api_key=access.api_key,
            base_url=access.base_url or self._default_base_url,
            max_retries=0,
            timeout=timeout_s,
            http_client=self._http_client(),
        )
        params: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_output_tokens,
            "messages": to_messages(request.messages),
        }
        system = render_system(request.system)
        if system:
            params["system"] = [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]
        if request.tools:
            params["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": dict(t.input_schema)}
                for t in request.tools
            ]
            if force_tool is not None:
                params["tool_choice"] = {"type": "tool", "name": force_tool}
        try:
            response = await client.messages.create(**params)
        except anthropic.AnthropicError as exc:
            raise map_error(exc, self.name) from None
        return from_response(response)

    async def complete_structured(
        self, request: ModelRequest, access: ProviderAccess, *, timeout_s: float
    ) -> ModelResponse:
        """The request's only tool is forced (structured output, see the base class)."""
        return await self.complete(request, access, timeout_s=timeout_s, force_tool=request.tools[0].name)

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None
