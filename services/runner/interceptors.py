"""Tool-call interceptors: the loop's extension point around every tool call.

Each interceptor sees a call before it runs (and may answer it instead, or ask
the run to stop after this batch) and its outcome after it ran (and may
rewrite it). The loop applies them in order and knows none of them. What is
here is the runtime's own policy; the next issue adds PII pseudonymization and
autonomy gating (propose / auto) as further interceptors, without touching the
loop:

- :class:`DoomLoopGuard` — nudge after 3 identical consecutive calls, stop the
  run as ``looping`` after more than 5 [002, 004 §8.2];
- :class:`ArgumentGuard` — unknown tool, arguments that are not JSON or do not
  match the schema: an error result back to the model, never a crash;
- :class:`FinishTool` — a local ``finish`` tool ends the run as completed;
- :class:`HandoffTool` — ``crm_request_human_handoff`` ends the run in handoff.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any, Protocol

import jsonschema

from services.runner.metrics import TOOL_LOOP_SUSPICIOUS
from services.runner.outcome import LOOPING, HandoffRequest, OutcomeKind
from services.runner.providers.base import ToolCallRequest, ToolOutcome, ToolSpec
from switchboard.contracts.enums import HandoffTrigger, Urgency
from switchboard.observability.logging import get_logger
from switchboard.tool_catalog import REQUEST_HUMAN_HANDOFF

log = get_logger(__name__)

FINISH_TOOL = "finish"
FINISH_SPEC = ToolSpec(
    name=FINISH_TOOL,
    description="Call when the task is complete. `text` is the final answer of the run.",
    input_schema={
        "type": "object",
        "properties": {"text": {"type": "string", "description": "the final answer"}},
        "required": ["text"],
    },
)


@dataclass(frozen=True, slots=True)
class StopRequest:
    """Ask the loop to end after the current batch (every call still gets a result)."""

    kind: OutcomeKind
    abort_reason: str | None = None
    final_text: str | None = None
    handoff: HandoffRequest | None = None
    detail: str = ""


@dataclass
class CallContext:
    """What an interceptor may look at and change for the current step."""

    step: int
    offered: dict[str, ToolSpec]
    notes: list[str] = field(default_factory=list)
    stop: StopRequest | None = None
    guard_events: list[tuple[str, str]] = field(default_factory=list)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def guard(self, name: str, detail: str) -> None:
        self.guard_events.append((name, detail))


class ToolInterceptor(Protocol):
    async def before_call(self, ctx: CallContext, call: ToolCallRequest) -> ToolOutcome | None:
        """Return an outcome to answer the call without running it; None to let it run."""
        ...

    async def after_call(self, ctx: CallContext, call: ToolCallRequest, outcome: ToolOutcome) -> ToolOutcome: ...


class _Passthrough:
    async def before_call(self, ctx: CallContext, call: ToolCallRequest) -> ToolOutcome | None:
        return None

    async def after_call(self, ctx: CallContext, call: ToolCallRequest, outcome: ToolOutcome) -> ToolOutcome:
        return outcome


class DoomLoopGuard(_Passthrough):
    """Counts identical consecutive calls (same tool, same canonical arguments) across steps."""

    def __init__(self, *, nudge_after: int = 3, stop_after: int = 5, labels: dict[str, str] | None = None) -> None:
        self._nudge_after = nudge_after
        self._stop_after = stop_after
        self._labels = labels or {}
        self._last: str | None = None
        self.streak = 0

    async def before_call(self, ctx: CallContext, call: ToolCallRequest) -> ToolOutcome | None:
        signature = call.signature
        self.streak = self.streak + 1 if signature == self._last else 1
        self._last = signature
        if self.streak > self._stop_after:
            TOOL_LOOP_SUSPICIOUS.inc()
            log.warning(
                "tool_loop_suspicious",
                extra={**self._labels, "tool_name": call.name, "identical_calls": self.streak},
            )
            ctx.guard("tool_loop_suspicious", f"{call.name} called {self.streak} times in a row with the same input")
            ctx.stop = StopRequest(OutcomeKind.ABORTED, abort_reason=LOOPING, detail="doom loop")
            return ToolOutcome(call.id, call.name, "Not executed: this exact call was repeated too many times.", True)
        if self.streak == self._nudge_after:
            ctx.guard("doom_loop_nudge", f"{call.name} called {self.streak} times in a row with the same input")
            ctx.note(
                f"You have called {call.name} {self.streak} times in a row with exactly the same input and got the "
                "same kind of result. Change your approach: use what you already have, try different input, "
                "or answer the customer."
            )
        return None


class ArgumentGuard(_Passthrough):
    """Malformed calls get an error result the model can learn from."""

    async def before_call(self, ctx: CallContext, call: ToolCallRequest) -> ToolOutcome | None:
        spec = ctx.offered.get(call.name)
        if spec is None:
            offered = ", ".join(sorted(ctx.offered)) or "none"
            return ToolOutcome(call.id, call.name, f"Unknown tool {call.name!r}. Available tools: {offered}.", True)
        if call.error:
            return ToolOutcome(
                call.id, call.name, f"Invalid arguments for {call.name}: {call.error}. Send a JSON object.", True
            )
        problem = _schema_problem(spec.input_schema, call.arguments)
        if problem:
            return ToolOutcome(call.id, call.name, f"Invalid arguments for {call.name}: {problem}", True)
        return None


@functools.lru_cache(maxsize=256)
def _validator(schema_json: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(schema_json))


def _schema_problem(schema: Any, arguments: Any) -> str | None:
    if not schema:
        return None
    try:
        validator = _validator(json.dumps(schema, sort_keys=True, default=str))
        error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    except jsonschema.exceptions.SchemaError:
        return None  # the server validates again; a schema we cannot read is not the model's fault
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "arguments"
    return f"{where}: {error.message}"[:500]


class FinishTool(_Passthrough):
    async def before_call(self, ctx: CallContext, call: ToolCallRequest) -> ToolOutcome | None:
        if call.name != FINISH_TOOL or FINISH_TOOL not in ctx.offered:
            return None
        text = str(call.arguments.get("text", "")).strip()
        ctx.stop = StopRequest(OutcomeKind.FINISHED, final_text=text or None, detail="finish tool")
        return ToolOutcome(call.id, call.name, "ok")


class HandoffTool(_Passthrough):
    """After the handoff tool ran, the run ends with status handoff."""

    async def after_call(self, ctx: CallContext, call: ToolCallRequest, outcome: ToolOutcome) -> ToolOutcome:
        if call.name != REQUEST_HUMAN_HANDOFF or outcome.is_error:
            return outcome
        urgency_text = str(call.arguments.get("urgency", Urgency.NORMAL.value))
        urgency = Urgency(urgency_text) if urgency_text in set(Urgency) else Urgency.NORMAL
        reason = str(call.arguments.get("reason", "")).strip() or "the agent asked for a human"
        ctx.stop = StopRequest(
            OutcomeKind.HANDOFF,
            handoff=HandoffRequest(reason=reason[:1000], urgency=urgency, trigger=HandoffTrigger.TOOL),
            detail="handoff tool",
        )
        return outcome


def default_interceptors(labels: dict[str, str] | None = None) -> list[ToolInterceptor]:
    """The runtime's own policy, in order (the doom-loop count sees every attempted call)."""
    return [DoomLoopGuard(labels=labels), ArgumentGuard(), FinishTool(), HandoffTool()]
