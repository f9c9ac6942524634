"""Google Gemini ``generateContent`` through the official ``google-genai`` SDK.

Automatic function calling is disabled: the SDK would otherwise call Python
functions itself and loop on its own, outside our budgets, trace and MCP
tools. The SDK's own retries are off too (one attempt): the loop retries
inside the run's budgets. The model's turn is echoed back verbatim so thought
signatures survive between steps.
"""

from __future__ import annotations

import itertools
import ssl
from typing import Any

import certifi
import httpx2
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

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
    kind_for_status,
    render_system,
    retry_after_seconds,
)

_STOP = {
    "STOP": StopReason.END_TURN,
    "MAX_TOKENS": StopReason.MAX_TOKENS,
    # More is coming under a continuation token: the SDK's automatic continuation is off (each hop is
    # billed and may reach the step's output cap again), so this answer is cut off at its cap.
    "CONTINUATION": StopReason.MAX_TOKENS,
    **{
        reason: StopReason.REFUSED
        for reason in (
            "SAFETY",
            "PROHIBITED_CONTENT",
            "BLOCKLIST",
            "SPII",
            "RECITATION",
            "IMAGE_SAFETY",
        )
    },
}
_ids = itertools.count(1)
# Gemini may return calls without an id; ours are marked so they are never sent back as if Gemini's.
_LOCAL_ID = "local_call_"


def _wire_id(call_id: str) -> str | None:
    return None if call_id.startswith(_LOCAL_ID) else call_id


def _model_content(message: AssistantMessage) -> types.Content:
    if message.provider == GoogleProvider.name and isinstance(message.provider_state, types.Content):
        return message.provider_state
    parts: list[types.Part] = []
    if message.text:
        parts.append(types.Part(text=message.text))
    parts.extend(
        types.Part(function_call=types.FunctionCall(id=_wire_id(c.id), name=c.name, args=dict(c.arguments)))
        for c in message.tool_calls
    )
    return types.Content(role="model", parts=parts)


def to_contents(messages: tuple[Message, ...]) -> list[types.Content]:
    contents: list[types.Content] = []
    for message in messages:
        if isinstance(message, UserMessage):
            contents.append(types.Content(role="user", parts=[types.Part(text=message.text)]))
        elif isinstance(message, AssistantMessage):
            contents.append(_model_content(message))
        else:
            parts = [
                types.Part(
                    function_response=types.FunctionResponse(
                        id=_wire_id(r.call_id),
                        name=r.name,
                        response={"error": r.content} if r.is_error else {"result": r.content},
                    )
                )
                for r in message.results
            ]
            parts.extend(types.Part(text=note) for note in message.notes)
            contents.append(types.Content(role="user", parts=parts))
    return contents


def from_response(response: Any) -> ModelResponse:
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[ToolCallRequest] = []
    candidates = response.candidates or []
    content = candidates[0].content if candidates else None
    for part in content.parts if content and content.parts else []:
        if part.function_call is not None:
            call = part.function_call
            calls.append(ToolCallRequest.parse(call.id or f"{_LOCAL_ID}{next(_ids)}", call.name or "", call.args or {}))
        elif part.text:
            (thinking if part.thought else texts).append(part.text)
    meta = response.usage_metadata
    prompt = (meta.prompt_token_count or 0) if meta else 0
    cached = (meta.cached_content_token_count or 0) if meta else 0
    tool_prompt = (meta.tool_use_prompt_token_count or 0) if meta else 0
    output = ((meta.candidates_token_count or 0) + (meta.thoughts_token_count or 0)) if meta else 0
    finish = candidates[0].finish_reason if candidates else None
    finish_name = getattr(finish, "value", None) or str(finish or "")
    blocked = getattr(getattr(response, "prompt_feedback", None), "block_reason", None) is not None
    if calls:
        stop = StopReason.TOOL_USE
    elif blocked and not candidates:  # the prompt itself was blocked: no candidate at all
        stop = StopReason.REFUSED
    else:
        stop = _STOP.get(finish_name, StopReason.OTHER)
    return ModelResponse(
        text="".join(texts),
        tool_calls=tuple(calls),
        usage=TokenUsage(
            input_tokens=max(0, prompt - cached) + tool_prompt,
            output_tokens=output,
            cache_read_tokens=cached,
        ),
        stop_reason=stop,
        thinking="".join(thinking),
        provider_state=content,
    )


def _is_bad_key(exc: genai_errors.APIError) -> bool:
    # Gemini answers an invalid key with 400 INVALID_ARGUMENT, reason API_KEY_INVALID.
    return exc.code == 400 and "API_KEY_INVALID" in str(exc.details)


def map_error(exc: BaseException, provider: str) -> ProviderError:
    if isinstance(exc, genai_errors.APIError):
        if _is_bad_key(exc):
            return ProviderError(ProviderErrorKind.AUTH, provider=provider, status=exc.code)
        headers = getattr(exc.response, "headers", None)
        waited = retry_after_seconds(headers) if headers is not None else None
        return ProviderError(
            kind_for_status(int(exc.code or 0)) if exc.code else ProviderErrorKind.OTHER,
            provider=provider,
            status=exc.code,
            retry_after_s=waited if waited is not None else _retry_delay(getattr(exc, "details", None)),
        )
    if isinstance(exc, httpx2.TimeoutException):
        return ProviderError(ProviderErrorKind.TIMEOUT, provider=provider)
    if isinstance(exc, httpx2.TransportError):
        return ProviderError(ProviderErrorKind.CONNECTION, provider=provider)
    return ProviderError(ProviderErrorKind.OTHER, provider=provider)


def _retry_delay(details: object) -> float | None:
    """Gemini says how long to wait in its error body, not a header: a ``google.rpc.RetryInfo``
    detail with ``retryDelay`` such as ``"31s"`` (ignored, the loop retried after its own backoff
    and a daily quota's 429 was retried until it failed)."""
    error = details.get("error") if isinstance(details, dict) else None
    for item in error.get("details") or () if isinstance(error, dict) else ():
        if isinstance(item, dict) and str(item.get("@type", "")).endswith("RetryInfo"):
            delay = str(item.get("retryDelay", ""))
            try:
                return max(0.0, float(delay.removesuffix("s")))
            except ValueError:
                return None
    return None


# Gemini 2.5's accepted thinking budgets: Pro takes 128-32,768 and cannot stop thinking, Flash
# 0-24,576 (Google's "Thinking" guide); the range both accept.
MIN_THINKING_BUDGET = 128
MAX_THINKING_BUDGET = 24_576


def thinking_budget(reasoning_tokens: int) -> int:
    """``reasoning_tokens`` within what every Gemini 2.5 accepts (a budget-lowered cap may ask for less)."""
    return min(max(reasoning_tokens, MIN_THINKING_BUDGET), MAX_THINKING_BUDGET)


class GoogleProvider(ModelProvider):
    name = "google"

    def __init__(self, *, default_base_url: str | None = None) -> None:
        self._default_base_url = default_base_url
        self._http: httpx2.AsyncClient | None = None
        self._sync_http: httpx2.Client | None = None
        self._ssl: ssl.SSLContext | None = None

    def _http_options(self, base_url: str | None, timeout_s: float) -> types.HttpOptions:
        # Shared connection pools and TLS context: without them the SDK builds a TLS context
        # (reading the CA bundle, ~60 ms) for every client, i.e. for every call.
        if self._http is None or self._sync_http is None or self._ssl is None:
            self._http = httpx2.AsyncClient(limits=httpx2.Limits(max_connections=1000, max_keepalive_connections=100))
            self._sync_http = httpx2.Client()
            self._ssl = ssl.create_default_context(cafile=certifi.where())
        return types.HttpOptions(
            base_url=base_url,
            timeout=int(timeout_s * 1000),
            retry_options=types.HttpRetryOptions(attempts=1),
            httpx_async_client=self._http,
            httpx_client=self._sync_http,
            async_client_args={"ssl": self._ssl},
        )

    async def complete(
        self, request: ModelRequest, access: ProviderAccess, *, timeout_s: float, force_tool: str | None = None
    ) -> ModelResponse:
        client = genai.Client(
            api_key=access.api_key,
            http_options=self._http_options(access.base_url or self._default_base_url, timeout_s),
        )
        system = render_system(request.system)
        config = types.GenerateContentConfig(
            system_instruction=system or None,
            max_output_tokens=request.max_output_tokens,
            # Gemini 2.5 thinks by default and its thinking counts against max_output_tokens.
            thinking_config=(
                types.ThinkingConfig(thinking_budget=thinking_budget(request.reasoning_tokens))
                if request.reasoning_tokens
                else None
            ),
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
            # Off for the same reason: every hop is a billed call the step's budget admission never saw.
            automatic_continuation=False,
            tools=(
                [
                    types.Tool(
                        function_declarations=[
                            types.FunctionDeclaration(
                                name=t.name, description=t.description, parameters_json_schema=dict(t.input_schema)
                            )
                            for t in request.tools
                        ]
                    )
                ]
                if request.tools
                else None
            ),
            tool_config=(
                types.ToolConfig(
                    function_calling_config=types.FunctionCallingConfig(
                        mode=types.FunctionCallingConfigMode.ANY, allowed_function_names=[force_tool]
                    )
                )
                if force_tool is not None
                else None
            ),
        )
        try:
            response = await client.aio.models.generate_content(
                model=request.model, contents=to_contents(request.messages), config=config
            )
        except (genai_errors.APIError, httpx2.HTTPError) as exc:
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
        if self._sync_http is not None:
            self._sync_http.close()
            self._sync_http = None
