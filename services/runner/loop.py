"""The bounded agent loop [000 runAgent, 004 §6.1]: model call → tool calls → results → repeat.

One loop for every agent. It depends only on interfaces — a provider and its
access, a :class:`ToolBox`, an :class:`EventSink`, a :class:`TraceSink`, a
:class:`SteeringInbox`, interceptors — so it is tested with fakes and the
next issue's features (memory, slash commands, PII, autonomy) plug in as
context builders (``services.runner.context``) and interceptors
(``services.runner.interceptors``) without changing it.

Per step:

1. **turn boundary**: steering guidance and nudges are added to the
   transcript; an interrupt stops the run here (never between a tool call and
   its result);
2. **budget check** (``services.runner.budget``): max_steps, then the token and
   cost budgets against the worst case of the step; the step's output cap is
   lowered to what is affordable, or the run stops *before* calling;
3. **model call** with a per-call timeout; rate limits, 5xx, timeouts and
   connection errors are retried with exponential backoff (honoring
   ``retry-after``); an invalid key or a bad request is not;
4. **tool calls**, one after another, through the interceptors; an error
   becomes an error result for the model; an unreachable tool server ends the
   run in handoff [004 R6];
5. the step is appended to the trace (persisted as it goes).

The whole loop runs under the silence watchdog: no model output or tool result
for ``silence_timeout_s`` aborts it (``silence_timeout``, family silentRun).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from services.runner.budget import ModelPrice, RunLimits, admit_step, estimate_tokens, reasoning_share
from services.runner.context import PromptDraft
from services.runner.handoff import keyword_handoff, match_handoff_keyword
from services.runner.interceptors import CallContext, StopRequest, ToolInterceptor
from services.runner.metrics import PROVIDER_RETRIES
from services.runner.outcome import (
    ANSWER_REFUSED,
    INTERRUPTED,
    OUTPUT_LIMIT_REACHED,
    SILENCE_TIMEOUT,
    CallRecord,
    HandoffRequest,
    LoopOutcome,
    OutcomeKind,
    RunFailure,
)
from services.runner.pii import Pseudonymizer, SealedRequest
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
    ToolOutcome,
    ToolResults,
    UserMessage,
    render_system,
)
from services.runner.tools.base import ToolBox, ToolServerUnavailable
from switchboard.contracts.enums import ErrorFamily, HandoffTrigger, Urgency

TRACE_TEXT_CHARS = 4000


class EventSink(Protocol):
    """Live events of one run (``run_events``); every method returns at once."""

    def text(self, text: str) -> None: ...
    def thinking(self, text: str) -> None: ...
    def tool_call(self, call: ToolCallRequest) -> None: ...
    def tool_result(self, outcome: ToolOutcome, duration_ms: int) -> None: ...
    def usage(self, usage: TokenUsage, cost_micros: int) -> None: ...
    def error(self, code: str, message: str, family: ErrorFamily, retryable: bool) -> None: ...
    def debug(self, name: str, detail: str) -> None: ...


class TraceSink(Protocol):
    """Persists the trace as it goes (``ai_agent_runs.tool_calls``) with the running totals.

    ``final``: the run's last entries; the sink may keep them for the terminal transaction,
    which writes them with the outcome (one transaction fewer per run)."""

    async def append(
        self, entries: list[dict[str, Any]], *, steps: int, usage: TokenUsage, cost: int, final: bool = False
    ) -> None: ...


class SteeringInbox(Protocol):
    """Messages for this run from the ``steering`` topic, read at turn boundaries."""

    def drain(self) -> list[str]: ...

    @property
    def interrupted(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 4
    initial_backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    # The longest ``retry-after`` waited for; a provider asking for more fails the step now: the
    # customer is not kept waiting minutes (cut to the backoff cap, the retry came too early and
    # failed again, the wait wasted).
    max_retry_after_s: float = 30.0

    def delay(self, attempt: int, retry_after_s: float | None) -> float:
        """The wait before attempt ``attempt + 1``: the backoff, or the provider's ``retry-after``
        when longer (honoured in full: a retry sooner only fails again)."""
        base = min(self.max_backoff_s, self.initial_backoff_s * 2 ** (attempt - 1))
        jittered = base * (0.8 + 0.4 * random.random())
        return max(jittered, retry_after_s) if retry_after_s is not None else jittered

    def too_long(self, retry_after_s: float | None) -> bool:
        """Whether the provider asks for a longer wait than a step may take."""
        return retry_after_s is not None and retry_after_s > self.max_retry_after_s


@dataclass(frozen=True, slots=True)
class LoopConfig:
    model: str
    limits: RunLimits
    price: ModelPrice
    call_timeout_s: float
    tool_timeout_s: float
    silence_timeout_s: float
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # The version's handoff keywords: a message steered into the run that holds one hands the
    # conversation off at the next turn boundary, as it would have before the run (docs/runner.md).
    handoff_keywords: tuple[str, ...] = ()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _message_text(message: Message) -> str:
    if isinstance(message, UserMessage):
        return message.text
    if isinstance(message, AssistantMessage):
        return message.text + "".join(c.name + c.arguments_json for c in message.tool_calls)
    return "".join(r.content for r in message.results) + "".join(message.notes)


def estimate_request_tokens(request: ModelRequest) -> int:
    """Worst-case input of a request nobody has measured yet (see ``services.runner.budget``)."""
    tools = json.dumps([[t.name, t.description, t.input_schema] for t in request.tools], default=str)
    return (
        estimate_tokens(render_system(request.system))
        + sum(estimate_tokens(_message_text(m)) for m in request.messages)
        + (estimate_tokens(tools) if request.tools else 0)
    )


def model_entry(
    response: ModelResponse,
    cost: int,
    *,
    step: int,
    started: float,
    started_at: str,
    attempts: int,
    max_output_tokens: int,
    text: str | None = None,
) -> dict[str, Any]:
    """One ``model`` trace entry (also for calls made for the run outside the loop: classification)."""
    return {
        "step": step,
        "kind": "model",
        "started_at": started_at,
        "ended_at": _now(),
        "duration_ms": int((time.monotonic() - started) * 1000),
        "attempts": attempts,
        "max_output_tokens": max_output_tokens,
        "stop_reason": response.stop_reason.value,
        "text": (response.text if text is None else text)[:TRACE_TEXT_CHARS],
        "tool_calls": [c.name for c in response.tool_calls],
        "tokens_in": response.usage.input_tokens,
        "tokens_out": response.usage.output_tokens,
        "cache_read_tokens": response.usage.cache_read_tokens,
        "cache_write_tokens": response.usage.cache_write_tokens,
        "cost_micros": cost,
    }


class AgentLoop:
    """Runs one prompt to an outcome. Create one per run."""

    def __init__(
        self,
        *,
        config: LoopConfig,
        provider: ModelProvider,
        access: ProviderAccess,
        tools: ToolBox,
        events: EventSink,
        trace: TraceSink,
        steering: SteeringInbox,
        interceptors: Sequence[ToolInterceptor],
        pii: Pseudonymizer | None = None,
    ) -> None:
        self._config = config
        # Every request to the provider is sealed by it (services/runner/pii.py): no raw PII leaves.
        self._pii = pii or Pseudonymizer()
        self._provider = provider
        self._access = access
        self._tools = tools
        self._events = events
        self._trace = trace
        self._steering = steering
        self._interceptors = list(interceptors)
        self._usage = TokenUsage()
        self._cost = 0
        # Issue 6 item 9: work done for this run outside its own model calls (classification,
        # sub-agents) is summed into the totals; its cost was priced at its own model's price.
        self._own_usage = TokenUsage()
        self._absorbed_cost = 0
        self._steps = 0
        self._tool_calls = 0
        self._watchdog: asyncio.Timeout | None = None
        self._pending: list[dict[str, Any]] = []
        self._last_output = 0
        self._calls: list[CallRecord] = []
        # The tool call being executed, so an abort can still give it a result in the trace.
        self._in_flight: tuple[ToolCallRequest, float, str] | None = None

    # ------------------------------------------------------------------ public

    @property
    def steps(self) -> int:
        return self._steps

    @property
    def config(self) -> LoopConfig:
        return self._config

    @property
    def interrupted(self) -> bool:
        """Whether this run was asked to stop (a steering interrupt: a person took over, or the
        conversation's policy stops a run for a newer message)."""
        return self._steering.interrupted

    @property
    def usage(self) -> TokenUsage:
        """Tokens used so far, absorbed work included."""
        return self._usage

    @property
    def cost_micros(self) -> int:
        return self._cost

    def absorb(self, entries: Sequence[dict[str, Any]], usage: TokenUsage, cost_micros: int) -> None:
        """Count work done for this run outside its own model calls (a classification, a sub-agent's
        nested loop; docs/agent-context.md): its trace entries join this run's, its usage and cost
        its totals — so the next step's budget check and the run's record include them."""
        self._pending.extend(entries)
        self._usage = self._usage + usage
        self._absorbed_cost += cost_micros
        self._cost += cost_micros
        self._touch()

    def touch(self) -> None:
        """Output happened on this run's behalf (a sub-agent's step): reset the silence watchdog."""
        self._touch()

    async def record_spend(self, pending_usage: TokenUsage, pending_cost: int) -> None:
        """Write this run's spend so far plus ``pending`` (a sub-agent's steps, absorbed only when it
        returns) to its row: a runner killed mid-delegation leaves a row that counts what the
        provider billed, for the recovery that closes it as lost (its trace entries stay for the
        absorb)."""
        await self._trace.append(
            [], steps=self._steps, usage=self._usage + pending_usage, cost=self._cost + pending_cost
        )

    async def run(self, draft: PromptDraft) -> LoopOutcome:
        try:
            async with asyncio.timeout(self._config.silence_timeout_s) as watchdog:
                self._watchdog = watchdog
                return await self._steps_until_done(draft)
        except TimeoutError:
            if self._watchdog is None or not self._watchdog.expired():
                raise
            self._close_in_flight("silence timeout")
            self._record_guard("silence_watchdog", f"no output for {self._config.silence_timeout_s:.0f}s")
            await self._flush_trace(final=True)
            return self._outcome(
                OutcomeKind.ABORTED,
                abort_reason=SILENCE_TIMEOUT,
                summary=f"Stopped: no output for {self._config.silence_timeout_s:.0f} seconds.",
            )

    # ------------------------------------------------------------------ the loop

    async def _steps_until_done(self, draft: PromptDraft) -> LoopOutcome:
        messages: list[Message] = list(draft.messages)
        offered = {t.name: t for t in draft.tools}
        last_input: int | None = None
        appended_since = ""
        while True:
            # 1. turn boundary: steering guidance and nudges, or an interrupt.
            guidance = self._steering.drain()
            keyword = next(
                (m for g in guidance if (m := match_handoff_keyword(g, self._config.handoff_keywords)) is not None),
                None,
            )
            if keyword is not None:  # the steered message is the run's (it answers it): by handing off
                self._record_guard("handoff_keyword", f"a message sent meanwhile holds {keyword.keyword!r}")
                await self._flush_trace(final=True)
                return self._outcome(
                    OutcomeKind.HANDOFF,
                    handoff=keyword_handoff(keyword),
                    summary=f"Handed off by keyword {keyword.keyword!r}, written while the run worked.",
                )
            if guidance:
                texts = tuple(f"[Message from the customer while you were working] {g}" for g in guidance)
                messages = _with_notes(messages, texts)
                appended_since += "".join(texts)
                self._events.debug("steering_applied", f"{len(texts)} message(s) added at the turn boundary")
            if self._steering.interrupted:
                self._record_guard("interrupt", "interrupted by a steering message")
                await self._flush_trace(final=True)
                return self._outcome(OutcomeKind.ABORTED, abort_reason=INTERRUPTED, summary="Interrupted.")

            # 2. budgets, against the worst case of this step.
            probe = ModelRequest(
                model=self._config.model,
                system=draft.system,
                messages=tuple(messages),
                tools=draft.tools,
                max_output_tokens=self._config.limits.max_output_tokens,
            )
            next_input = (
                estimate_request_tokens(probe)
                if last_input is None
                else last_input + self._last_output + estimate_tokens(appended_since)
            )
            admission = admit_step(
                self._config.limits,
                self._config.price,
                steps_done=self._steps,
                used=self._usage,
                cost_micros=self._cost,
                next_input_tokens=next_input,
            )
            if not admission.admitted:
                reason = admission.refusal or "budget"
                self._record_guard("budget_stop", f"{reason} before step {self._steps + 1}")
                self._events.debug("budget_stop", reason)
                await self._flush_trace(final=True)
                return self._outcome(
                    OutcomeKind.ABORTED,
                    abort_reason=reason,
                    summary=f"Stopped before step {self._steps + 1}: {reason}.",
                )
            request = self._pii.seal(
                ModelRequest(
                    model=self._config.model,
                    system=draft.system,
                    messages=tuple(messages),
                    tools=draft.tools,
                    max_output_tokens=admission.max_output_tokens,
                    reasoning_tokens=reasoning_share(self._config.price, admission.max_output_tokens),
                )
            )

            # 3. the model call (retried inside).
            try:
                response = await self._call_model(request)
            except ProviderError as exc:
                await self._flush_trace(final=True)
                return self._provider_failure(exc)
            self._steps += 1
            last_input = response.usage.all_input
            self._last_output = response.usage.output_tokens
            appended_since = ""
            self._account(response)
            messages.append(
                AssistantMessage(
                    text=response.text,
                    tool_calls=response.tool_calls,
                    provider=self._provider.name,
                    provider_state=response.provider_state,
                )
            )
            if not response.tool_calls and response.stop_reason is StopReason.MAX_TOKENS:
                # Cut off at the cap (the budget's, or the configured one; a reasoning model may have
                # spent it all thinking): half a sentence is not sent to a customer as an answer.
                cap = admission.max_output_tokens
                return await self._not_sent(
                    OUTPUT_LIMIT_REACHED,
                    f"the answer reached the {cap}-token output cap",
                    f"The answer of step {self._steps} was cut off at its {cap}-token output cap",
                )
            if not response.tool_calls and response.stop_reason is StopReason.REFUSED:
                # A refusal or a content filter: whatever text came with it is not an answer, and an
                # empty "completed" run would leave the customer waiting with nobody told. Aborted,
                # not sent: the run is unanswered, and the org's webhook hears of it.
                return await self._not_sent(
                    ANSWER_REFUSED,
                    "the provider withheld the answer (refusal or content filter)",
                    f"The model's provider withheld the answer of step {self._steps} (a refusal or a content filter)",
                )
            if not response.tool_calls:
                await self._flush_trace(final=True)
                return self._outcome(OutcomeKind.ANSWERED, final_text=response.text)

            # 4. the tool calls.
            ctx = CallContext(step=self._steps, offered=offered)
            try:
                results = await self._run_tools(ctx, response.tool_calls)
            except ToolServerUnavailable:
                results = _not_executed(response.tool_calls, "Not executed: the tool server is unavailable.")
                messages.append(ToolResults(tuple(results)))
                self._record_guard("tool_server_unavailable", "automatic handoff")
                await self._flush_trace(final=True)
                failure = RunFailure(
                    ToolServerUnavailable.code, "the tool server is unavailable", ErrorFamily.TOOL_FAILURE
                )
                return self._outcome(
                    OutcomeKind.HANDOFF,
                    failure=failure,
                    handoff=HandoffRequest(
                        reason="The tool server is unavailable; a person should take over.",
                        urgency=Urgency.HIGH,
                        trigger=HandoffTrigger.TOOL,
                        failure=failure,
                    ),
                    summary="Handed off: the tool server is unavailable.",
                )
            messages.append(ToolResults(tuple(results), notes=tuple(ctx.notes)))
            appended_since = "".join(r.content for r in results) + "".join(ctx.notes)
            await self._flush_trace(final=ctx.stop is not None)
            if ctx.stop is not None:
                return self._stopped(ctx.stop)

    async def _not_sent(self, reason: str, detail: str, summary: str) -> LoopOutcome:
        """An answer that is no answer to send (cut off, withheld): aborted with ``reason``, its guard
        in the trace and the live events."""
        self._record_guard(reason, detail)
        self._events.debug(reason, detail)
        await self._flush_trace(final=True)
        return self._outcome(OutcomeKind.ABORTED, abort_reason=reason, summary=f"{summary}; nothing was sent.")

    def abandon(self, reason: str) -> tuple[list[dict[str, Any]], LoopOutcome]:
        """For an abort from outside (cancellation at shutdown): the unsaved trace, with an error
        result for a tool call left in flight, and the totals so far."""
        self._close_in_flight(reason)
        self._record_guard("abandoned", reason)
        entries, self._pending = self._pending, []
        return entries, self._outcome(OutcomeKind.HANDED_BACK, summary=f"Stopped: {reason}.")

    # ------------------------------------------------------------------ pieces

    def _close_in_flight(self, reason: str) -> None:
        if self._in_flight is not None:
            call, started, started_at = self._in_flight
            self._in_flight = None
            self._trace_tool(call, None, started, started_at, error=f"not completed: {reason}")

    async def _call_model(self, request: SealedRequest) -> ModelResponse:
        policy = self._config.retry
        attempt = 0
        started = time.monotonic()
        started_at = _now()
        while True:
            attempt += 1
            try:
                async with asyncio.timeout(self._config.call_timeout_s):
                    response = await self._provider.complete(
                        request, self._access, timeout_s=self._config.call_timeout_s
                    )
                break
            except TimeoutError:
                error = ProviderError(ProviderErrorKind.TIMEOUT, provider=self._provider.name)
            except ProviderError as exc:
                error = exc
            if not error.retryable or attempt >= policy.max_attempts or policy.too_long(error.retry_after_s):
                self._pending.append(
                    {
                        "step": self._steps + 1,
                        "kind": "model",
                        "started_at": started_at,
                        "ended_at": _now(),
                        "duration_ms": int((time.monotonic() - started) * 1000),
                        "attempts": attempt,
                        "error": error.code,
                    }
                )
                raise error
            delay = policy.delay(attempt, error.retry_after_s)
            PROVIDER_RETRIES.labels(self._provider.name, error.kind.value).inc()
            self._events.debug("provider_retry", f"{error.code}; attempt {attempt + 1} in {delay:.1f}s")
            await asyncio.sleep(delay)
        self._touch()
        cost = self._config.price.cost(response.usage)
        self._pending.append(
            model_entry(
                response,
                cost,
                step=self._steps + 1,
                started=started,
                started_at=started_at,
                attempts=attempt,
                max_output_tokens=request.max_output_tokens,
            )
        )
        return response

    def _account(self, response: ModelResponse) -> None:
        before = self._cost
        self._usage = self._usage + response.usage
        self._own_usage = self._own_usage + response.usage
        self._cost = self._config.price.cost(self._own_usage) + self._absorbed_cost
        if response.thinking:
            self._events.thinking(response.thinking)
        if response.text:
            self._events.text(response.text)
        for call in response.tool_calls:
            self._events.tool_call(call)
        self._events.usage(response.usage, self._cost - before)

    async def _run_tools(self, ctx: CallContext, calls: tuple[ToolCallRequest, ...]) -> list[ToolOutcome]:
        results: list[ToolOutcome] = []
        for index, call in enumerate(calls):
            if ctx.stop is not None or self._steering.interrupted:
                why = "the run is ending" if ctx.stop is not None else "the run was interrupted"
                skipped = _not_executed(calls[index:], f"Not executed: {why}.")
                for skipped_call, skipped_outcome in zip(calls[index:], skipped, strict=True):
                    self._trace_tool(skipped_call, skipped_outcome, time.monotonic(), _now())
                results.extend(skipped)
                break
            started = time.monotonic()
            started_at = _now()
            outcome: ToolOutcome | None = None
            for interceptor in self._interceptors:
                outcome = await interceptor.before_call(ctx, call)
                if outcome is not None:
                    break
            if outcome is None:
                self._in_flight = (call, started, started_at)
                try:
                    outcome = await self._tools.call(call, timeout_s=self._config.tool_timeout_s)
                except ToolServerUnavailable:
                    self._in_flight = None
                    self._trace_tool(call, None, started, started_at, error="tool server unavailable")
                    raise
                self._in_flight = None
            for interceptor in self._interceptors:
                outcome = await interceptor.after_call(ctx, call, outcome)
            self._tool_calls += 1
            self._calls.append(CallRecord(call.id, call.name, call.arguments_json, outcome.is_error))
            duration_ms = int((time.monotonic() - started) * 1000)
            self._touch()
            self._events.tool_result(outcome, duration_ms)
            self._trace_tool(call, outcome, started, started_at)
            results.append(outcome)
        for name, detail in ctx.guard_events:
            self._record_guard(name, detail)
            self._events.debug(name, detail)
        return results

    def _trace_tool(
        self,
        call: ToolCallRequest,
        outcome: ToolOutcome | None,
        started: float,
        started_at: str,
        *,
        error: str | None = None,
    ) -> None:
        self._pending.append(
            {
                "step": self._steps,
                "kind": "tool",
                "tool_call_id": call.id,
                "tool_name": call.name,
                "args": dict(call.arguments) if call.error is None else call.arguments_json,
                "result": outcome.content[:TRACE_TEXT_CHARS] if outcome else None,
                "is_error": outcome.is_error if outcome else True,
                "error": error or (outcome.content[:500] if outcome and outcome.is_error else None),
                "started_at": started_at,
                "ended_at": _now(),
                "duration_ms": int((time.monotonic() - started) * 1000),
            }
        )

    def _record_guard(self, name: str, detail: str) -> None:
        self._pending.append({"step": self._steps, "kind": "guard", "name": name, "detail": detail, "at": _now()})

    async def _flush_trace(self, *, final: bool = False) -> None:
        entries = list(self._pending)
        await self._trace.append(entries, steps=self._steps, usage=self._usage, cost=self._cost, final=final)
        # Dropped only once written: a failed write leaves them for abandon(), so a run that
        # crashes here still records its trace with its finish.
        self._pending = self._pending[len(entries) :]

    def _touch(self) -> None:
        if self._watchdog is not None:
            self._watchdog.reschedule(asyncio.get_running_loop().time() + self._config.silence_timeout_s)

    def _provider_failure(self, exc: ProviderError) -> LoopOutcome:
        if exc.kind is ProviderErrorKind.AUTH:
            family, message = ErrorFamily.UNKNOWN, f"the {exc.provider} key was rejected (invalid or revoked)"
        elif exc.kind is ProviderErrorKind.FORBIDDEN:
            family, message = (
                ErrorFamily.UNKNOWN,
                f"the {exc.provider} key may not do this (a model or feature it has no access to)",
            )
        elif exc.kind is ProviderErrorKind.QUOTA:
            family, message = ErrorFamily.UNKNOWN, f"the {exc.provider} account's credit or quota is used up (billing)"
        elif exc.retryable:
            family, message = ErrorFamily.TRANSIENT_UPSTREAM, f"{exc} after retries"
        else:
            family, message = ErrorFamily.UNKNOWN, str(exc)
        self._events.error(exc.code, message, family, exc.retryable)
        return self._outcome(
            OutcomeKind.FAILED,
            failure=RunFailure(exc.code, message, family),
            summary=f"Failed: {message}.",
        )

    def _stopped(self, stop: StopRequest) -> LoopOutcome:
        if stop.kind is OutcomeKind.FINISHED:
            return self._outcome(OutcomeKind.FINISHED, final_text=stop.final_text)
        if stop.kind is OutcomeKind.HANDOFF:
            return self._outcome(OutcomeKind.HANDOFF, handoff=stop.handoff, summary="Handed off to a person.")
        return self._outcome(stop.kind, abort_reason=stop.abort_reason, summary=f"Stopped: {stop.detail}.")

    def _outcome(
        self,
        kind: OutcomeKind,
        *,
        final_text: str | None = None,
        abort_reason: str | None = None,
        failure: RunFailure | None = None,
        handoff: HandoffRequest | None = None,
        summary: str | None = None,
    ) -> LoopOutcome:
        return LoopOutcome(
            kind=kind,
            final_text=final_text,
            abort_reason=abort_reason,
            failure=failure,
            handoff=handoff,
            usage=self._usage,
            cost_micros=self._cost,
            steps=self._steps,
            tool_calls=self._tool_calls,
            summary=summary,
            calls=tuple(self._calls),
        )


def _not_executed(calls: Sequence[ToolCallRequest], text: str) -> list[ToolOutcome]:
    return [ToolOutcome(c.id, c.name, text, is_error=True) for c in calls]


def _with_notes(messages: list[Message], notes: tuple[str, ...]) -> list[Message]:
    """Deliver notes at the turn boundary: on the last tool results, or as a user message."""
    if messages and isinstance(messages[-1], ToolResults):
        last = messages[-1]
        return [*messages[:-1], ToolResults(last.results, notes=last.notes + notes)]
    return [*messages, UserMessage("\n".join(notes))]
