"""A local HTTP server speaking the three providers' real APIs, scripted per test.

The official SDKs are pointed at it through their base URL, so what is tested
is the real request the SDK sends and the real parsing of a real-shaped
answer — only the model is fake. One server answers:

- Anthropic ``POST /v1/messages``            (SDK base URL ``http://host:port``)
- OpenAI    ``POST /v1/chat/completions``    (SDK base URL ``http://host:port/v1``)
- Google    ``POST /v1/models/{model}:generateContent`` (or ``/v1beta/...``; base URL ``http://host:port``)

A test gives a *script*: a function from the parsed request to a :class:`Reply`
(text, tool calls, usage, or an HTTP error), or a list of replies served in
order. Every request is recorded with its headers.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.support.ports import free_port


@dataclass(frozen=True)
class Call:
    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    text: str = ""
    calls: tuple[Call, ...] = ()
    input_tokens: int = 100
    output_tokens: int = 20
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    status: int = 200
    error_body: dict[str, Any] | None = None
    delay_s: float = 0.0
    retry_after_s: int | None = None  # an error's ``retry-after`` header
    raw_arguments: str | None = None  # OpenAI only: send these exact (maybe malformed) arguments
    truncated: bool = False  # the answer stopped at the request's output cap (max tokens / length)
    # The provider's own stop / finish reason, as sent (a refusal, a content filter), instead of the usual.
    stop: str | None = None
    # OpenAI only: ``message.refusal`` (the model declined; content may be null).
    refusal: str | None = None


def text(value: str, **usage: int) -> Reply:
    return Reply(text=value, **usage)  # type: ignore[arg-type]


def tool(name: str, args: dict[str, Any] | None = None, **usage: int) -> Reply:
    return Reply(calls=(Call(name, args or {}),), **usage)  # type: ignore[arg-type]


@dataclass
class Received:
    provider: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


Script = Callable[[Received], Reply]

_ids = itertools.count(1)


def _anthropic(reply: Reply, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    content += [{"type": "tool_use", "id": f"toolu_{next(_ids)}", "name": c.name, "input": c.args} for c in reply.calls]
    return {
        "id": f"msg_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reply.stop or ("tool_use" if reply.calls else "max_tokens" if reply.truncated else "end_turn"),
        "stop_sequence": None,
        "usage": {
            "input_tokens": reply.input_tokens,
            "output_tokens": reply.output_tokens,
            "cache_read_input_tokens": reply.cache_read_tokens,
            "cache_creation_input_tokens": reply.cache_write_tokens,
        },
    }


def _openai_finish(reply: Reply) -> str:
    return reply.stop or ("tool_calls" if reply.calls else "length" if reply.truncated else "stop")


def _openai(reply: Reply, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None, "refusal": reply.refusal}
    if reply.calls:
        message["tool_calls"] = [
            {
                "id": f"call_{next(_ids)}",
                "type": "function",
                "function": {
                    "name": c.name,
                    "arguments": reply.raw_arguments if reply.raw_arguments is not None else json.dumps(c.args),
                },
            }
            for c in reply.calls
        ]
    prompt = reply.input_tokens + reply.cache_read_tokens
    return {
        "id": f"chatcmpl-{next(_ids)}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": _openai_finish(reply)}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": reply.output_tokens,
            "total_tokens": prompt + reply.output_tokens,
            "prompt_tokens_details": {"cached_tokens": reply.cache_read_tokens},
        },
    }


def _google(reply: Reply, model: str) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"text": reply.text}] if reply.text else []
    parts += [{"functionCall": {"name": c.name, "args": c.args}} for c in reply.calls]
    prompt = reply.input_tokens + reply.cache_read_tokens
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": parts},
                "finishReason": reply.stop or ("MAX_TOKENS" if reply.truncated else "STOP"),
                "index": 0,
                # More under a token (base64 bytes): what the SDK's automatic continuation would fetch.
                **({"continuationToken": "bW9yZQ=="} if reply.stop == "CONTINUATION" else {}),
            }
        ],
        "usageMetadata": {
            "promptTokenCount": prompt,
            "candidatesTokenCount": reply.output_tokens,
            "totalTokenCount": prompt + reply.output_tokens,
            "cachedContentTokenCount": reply.cache_read_tokens,
        },
        "modelVersion": model,
    }


_ERRORS = {
    "anthropic": lambda status: {"type": "error", "error": {"type": "api_error", "message": f"fake {status}"}},
    "openai": lambda status: {"error": {"message": f"fake {status}", "type": "api_error", "code": None}},
    "google": lambda status: {"error": {"code": status, "message": f"fake {status}", "status": "UNAVAILABLE"}},
}


class FakeLLM:
    """Start with ``await fake.start()``; ``url`` is the base for Anthropic and Google, ``openai_url`` for OpenAI."""

    def __init__(self, script: Script | list[Reply] | None = None) -> None:
        self.received: list[Received] = []
        self._script: Script = lambda _: Reply(text="ok")
        self.script(script or [])
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.port = free_port()

    def script(self, script: Script | list[Reply]) -> None:
        if callable(script):
            self._script = script
        elif script:
            replies = list(script)
            last = replies[-1]

            def ordered(_: Received) -> Reply:
                return replies.pop(0) if replies else last

            self._script = ordered

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        return f"{self.url}/v1"

    def calls_to(self, provider: str) -> list[Received]:
        return [r for r in self.received if r.provider == provider]

    async def _answer(self, provider: str, request: Request, model: str) -> JSONResponse:
        body = await request.json()
        received = Received(provider, request.url.path, dict(request.headers), body)
        self.received.append(received)
        reply = self._script(received)
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.status != 200:
            headers = {"retry-after": str(reply.retry_after_s)} if reply.retry_after_s is not None else None
            return JSONResponse(
                reply.error_body or _ERRORS[provider](reply.status), status_code=reply.status, headers=headers
            )
        render = {"anthropic": _anthropic, "openai": _openai, "google": _google}[provider]
        return JSONResponse(render(reply, model))

    async def _messages(self, request: Request) -> JSONResponse:
        return await self._answer("anthropic", request, "claude")

    async def _chat(self, request: Request) -> JSONResponse:
        return await self._answer("openai", request, "gpt")

    async def _generate(self, request: Request) -> JSONResponse:
        model = request.path_params["model"].split(":")[0]
        return await self._answer("google", request, model)

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1beta/models/{model:path}", self._generate, methods=["POST"]),
                Route("/v1/models/{model:path}", self._generate, methods=["POST"]),
            ]
        )

    async def start(self) -> FakeLLM:
        config = uvicorn.Config(
            self.app(), host="127.0.0.1", port=self.port, log_level="warning", lifespan="off", backlog=4096
        )
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.02)
        return self

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task


@dataclass
class ServedApp:
    """Any ASGI app served by uvicorn on a free port in the test's event loop."""

    app: Any
    port: int = field(default_factory=free_port)
    _server: uvicorn.Server | None = None
    _task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> ServedApp:
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.02)
        return self

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task
