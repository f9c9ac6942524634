"""OpenAI Chat Completions through the official ``openai`` SDK.

Also the adapter for any OpenAI-compatible server (vLLM, Ollama, LM Studio, a
proxy): a credential's ``base_url`` points the SDK there. Chat Completions is
used rather than the Responses API because it is what compatible servers speak.
"""

from __future__ import annotations

import json
from typing import Any

import openai

from services.runner.providers.base import (
    AssistantMessage,
    Message,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    ProviderAccess,
    ProviderError,
    ProviderErrorKind,
    StopReason,
    TokenUsage,
    ToolCallRequest,
    UserMessage,
    map_sdk_error,
    render_system,
)

_STOP = {
    "stop": StopReason.END_TURN,
    "tool_calls": StopReason.TOOL_USE,
    "length": StopReason.MAX_TOKENS,
    "content_filter": StopReason.REFUSED,
}


def to_messages(system: str, messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        if isinstance(message, UserMessage):
            out.append({"role": "user", "content": message.text})
        elif isinstance(message, AssistantMessage):
            entry: dict[str, Any] = {"role": "assistant", "content": message.text or None}
            if message.tool_calls:
                # A call whose arguments were not a JSON object goes back as "{}": servers that parse
                # them (vLLM and other OpenAI-compatible ones) refused the whole next request with a
                # 400, where the model should have read its tool's error and tried again.
                entry["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": "{}" if c.error else c.arguments_json},
                    }
                    for c in message.tool_calls
                ]
            out.append(entry)
        else:
            # Chat Completions has no error flag on a tool message: the content says it.
            out.extend(
                {
                    "role": "tool",
                    "tool_call_id": r.call_id,
                    "content": f"ERROR: {r.content}" if r.is_error else r.content,
                }
                for r in message.results
            )
            out.extend({"role": "user", "content": note} for note in message.notes)
    return out


def from_response(response: Any) -> ModelResponse:
    choice = response.choices[0]
    message = choice.message
    calls = tuple(
        ToolCallRequest.parse(call.id, call.function.name, call.function.arguments)
        for call in (message.tool_calls or ())
        if getattr(call, "type", "function") == "function"
    )
    usage = response.usage
    prompt = getattr(usage, "prompt_tokens", 0) or 0
    details = getattr(usage, "prompt_tokens_details", None)
    cached = (getattr(details, "cached_tokens", None) or 0) if details else 0
    written = (getattr(details, "cache_write_tokens", None) or 0) if details else 0
    reasoning = getattr(message, "reasoning_content", None)
    return ModelResponse(
        text=message.content or "",
        tool_calls=calls,
        usage=TokenUsage(
            input_tokens=max(0, prompt - cached - written),
            output_tokens=getattr(usage, "completion_tokens", 0) or 0,
            cache_read_tokens=cached,
            cache_write_tokens=written,
        ),
        # A refusal may come with finish_reason "stop" (the text then is in ``message.refusal``).
        stop_reason=(
            StopReason.REFUSED
            if getattr(message, "refusal", None) and not calls
            else _STOP.get(choice.finish_reason or "", StopReason.OTHER)
        ),
        thinking=reasoning if isinstance(reasoning, str) else "",
    )


def map_error(exc: Exception, provider: str) -> ProviderError:
    return map_sdk_error(exc, provider, openai)


class OpenAIProvider(ModelProvider):
    name = "openai"

    def __init__(self, *, default_base_url: str | None = None) -> None:
        self._default_base_url = default_base_url
        self._http: Any = None

    def _http_client(self) -> Any:
        if self._http is None:
            self._http = openai.DefaultAsyncHttpxClient()
        return self._http

    async def complete(
        self, request: ModelRequest, access: ProviderAccess, *, timeout_s: float, force_tool: str | None = None
    ) -> ModelResponse:
        client = openai.AsyncOpenAI(
            api_key=access.api_key,
            base_url=access.base_url or self._default_base_url,
            max_retries=0,
            timeout=timeout_s,
            http_client=self._http_client(),
        )
        params: dict[str, Any] = {
            "model": request.model,
            "messages": to_messages(render_system(request.system), request.messages),
            "max_completion_tokens": request.max_output_tokens,
        }
        if request.reasoning_tokens:
            # Chat Completions takes no thinking budget, only an effort; "low" keeps the thinking of
            # a customer's question well inside the half of the cap it is allowed.
            params["reasoning_effort"] = "low"
        if request.tools:
            params["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": dict(t.input_schema)},
                }
                for t in request.tools
            ]
            if force_tool is not None:
                params["tool_choice"] = {"type": "function", "function": {"name": force_tool}}
        try:
            response = await client.chat.completions.create(**params)
        except openai.OpenAIError as exc:
            raise map_error(exc, self.name) from None
        except json.JSONDecodeError:
            raise ProviderError(ProviderErrorKind.OTHER, provider=self.name) from None
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
