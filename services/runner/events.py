"""Live run events on ``run_events`` [002 "Streaming"]: thinking, text, tool_call, tool_result,
usage, error, debug, done.

They go straight to Kafka (not through the outbox): they are a live stream for
the SSE endpoint and analytics, derived from no row change, and the durable
record of a run is its row and trace in PostgreSQL. One process-wide
publisher task takes them from a bounded queue and enqueues them in the
producer's batch without waiting per record, so a run never waits for the
broker and each run's events keep their order (``seq`` numbers them too).
If the queue is full (broker down for long) events are dropped and counted,
never the run.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from prometheus_client import Counter

from services.runner.providers.base import TokenUsage, ToolCallRequest, ToolOutcome
from switchboard.contracts import (
    DebugInfo,
    RunError,
    RunEvent,
    RunRequested,
    ToolCall,
    ToolResult,
    Topics,
    UsageDelta,
)
from switchboard.contracts.enums import ErrorFamily, RunEventType, RunStatus
from switchboard.kafka.producer import RecordProducer
from switchboard.observability.logging import get_logger

log = get_logger(__name__)

EVENTS_DROPPED = Counter("switchboard_run_events_dropped_total", "Run events dropped because the queue was full")
MAX_EVENT_TEXT = 8000


class RunEventPublisher:
    """Ordered, non-blocking publication of run events for the whole process."""

    def __init__(self, producer: RecordProducer | None, *, maxsize: int = 50_000) -> None:
        self._producer = producer
        self._queue: asyncio.Queue[RunEvent] = asyncio.Queue(maxsize=maxsize)

    def publish(self, event: RunEvent) -> None:
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            EVENTS_DROPPED.inc()

    async def run(self, stop: asyncio.Event) -> None:
        """Publish until ``stop`` is set and the queue is empty."""
        while not (stop.is_set() and self._queue.empty()):
            try:
                event = await asyncio.wait_for(self._queue.get(), timeout=0.25)
            except TimeoutError:
                continue
            await self._send(event)
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await self._producer.flush()

    async def _send(self, event: RunEvent) -> None:
        if self._producer is None:
            return
        try:
            future = await self._producer.enqueue(Topics.RUN_EVENTS, event)
        except Exception as exc:
            log.warning("run event not published", extra={"run_id": str(event.run_id), "error": type(exc).__name__})
            return
        future.add_done_callback(_log_failure)


def _log_failure(future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("run event delivery failed", extra={"error": type(future.exception()).__name__})


def _clip(text: str) -> str:
    return text if len(text) <= MAX_EVENT_TEXT else text[:MAX_EVENT_TEXT] + "…"


class RunEvents:
    """The :class:`~services.runner.loop.EventSink` of one run."""

    def __init__(self, publisher: RunEventPublisher, request: RunRequested, *, model: str) -> None:
        self._publisher = publisher
        self._request = request
        self._model = model
        self._seq = 0

    def _emit(self, kind: RunEventType, **payload: Any) -> None:
        self._seq += 1
        request = self._request
        self._publisher.publish(
            RunEvent(
                org_id=request.org_id,
                request_id=request.request_id,
                conversation_id=request.conversation_id,
                run_id=request.run_id,
                agent_id=request.agent_id,
                seq=self._seq,
                type=kind,
                dry_run=request.dry_run,
                **payload,
            )
        )

    def text(self, text: str) -> None:
        self._emit(RunEventType.TEXT, text=_clip(text))

    def thinking(self, text: str) -> None:
        self._emit(RunEventType.THINKING, text=_clip(text))

    def tool_call(self, call: ToolCallRequest) -> None:
        self._emit(
            RunEventType.TOOL_CALL,
            tool_call=ToolCall(tool_call_id=call.id, tool_name=call.name, arguments_json=_clip(call.arguments_json)),
        )

    def tool_result(self, outcome: ToolOutcome, duration_ms: int) -> None:
        self._emit(
            RunEventType.TOOL_RESULT,
            tool_result=ToolResult(
                tool_call_id=outcome.call_id,
                tool_name=outcome.name,
                content=_clip(outcome.content),
                is_error=outcome.is_error,
                duration_ms=duration_ms,
            ),
        )

    def usage(self, usage: TokenUsage, cost_micros: int) -> None:
        self._emit(
            RunEventType.USAGE,
            usage=UsageDelta(
                tokens_in=usage.input_tokens,
                tokens_out=usage.output_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                cost_micro_usd=cost_micros,
                model=self._model,
            ),
        )

    def error(self, code: str, message: str, family: ErrorFamily, retryable: bool) -> None:
        self._emit(RunEventType.ERROR, error=RunError(code=code, message=message, family=family, retryable=retryable))

    def debug(self, name: str, detail: str) -> None:
        self._emit(RunEventType.DEBUG, debug=DebugInfo(name=name, detail=_clip(detail)))

    def done(self, status: RunStatus, summary: str | None = None) -> None:
        self._emit(RunEventType.DONE, status=status, text=summary)
