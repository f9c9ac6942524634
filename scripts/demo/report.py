"""Readable, incremental printing of the demo: sections, steps, replies, run traces, expectations."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TextIO


class Outcome(StrEnum):
    HELD = "held"
    FAILED = "FAILED"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class Expectation:
    scenario: str
    what: str
    outcome: Outcome
    detail: str = ""


@dataclass
class Report:
    """Prints as it goes and keeps every expectation; a skipped step never counts as held."""

    out: TextIO = sys.stdout
    expectations: list[Expectation] = field(default_factory=list)
    quiet: bool = False

    def _print(self, text: str) -> None:
        if not self.quiet:
            print(text, file=self.out, flush=True)

    def section(self, title: str) -> None:
        self._print(f"\n== {title}")

    def step(self, text: str) -> None:
        self._print(f"  · {text}")

    def customer(self, chat_id: str, text: str) -> None:
        self._print(f"  → customer {chat_id}: {text!r}")

    def reply(self, chat_id: str, text: str) -> None:
        self._print(f"  ← reply to {chat_id}: {text!r}")

    def expect(self, scenario: str, what: str, held: bool, detail: str = "") -> bool:
        outcome = Outcome.HELD if held else Outcome.FAILED
        self.expectations.append(Expectation(scenario, what, outcome, detail))
        mark = "✔" if held else "✘"
        self._print(f"  {mark} {what}" + (f" — {detail}" if detail and not held else ""))
        return held

    def skip(self, scenario: str, what: str, why: str) -> None:
        self.expectations.append(Expectation(scenario, what, Outcome.SKIPPED, why))
        self._print(f"  ○ not yet available: {why} — step skipped ({what})")

    def run(self, run: dict[str, Any]) -> None:
        """One run's trace summary (GET /api/v1/runs/{id})."""
        tools = [s.get("tool_name") for s in run.get("trace") or [] if s.get("tool_name")]
        reason = run.get("abort_reason") or run.get("error_code")
        self._print(
            f"  ▸ run {str(run['id'])[:8]} [{run.get('provider')}/{run.get('model')}] status={run['status']}"
            f" vitality={run.get('vitality')}{f' reason={reason}' if reason else ''}"
            f" steps={run.get('steps_count')} tools={tools or '-'}"
            f" tokens={run.get('tokens_in')}/{run.get('tokens_out')} cost=${run.get('cost_usd')}"
            f" latency={run.get('latency_ms')}ms messages={len(run.get('inbound_message_ids') or [])}"
        )

    def kv(self, key: str, value: object) -> None:
        self._print(f"  {key:<22} {value}")

    @property
    def failed(self) -> list[Expectation]:
        return [e for e in self.expectations if e.outcome is Outcome.FAILED]

    @property
    def skipped(self) -> list[Expectation]:
        return [e for e in self.expectations if e.outcome is Outcome.SKIPPED]

    @property
    def ok(self) -> bool:
        """Every expectation that was checked held (skips are reported, not counted as held)."""
        return not self.failed and any(e.outcome is Outcome.HELD for e in self.expectations)

    def summary(self) -> None:
        held = sum(e.outcome is Outcome.HELD for e in self.expectations)
        self.section("result")
        self._print(f"  {held} held, {len(self.failed)} failed, {len(self.skipped)} skipped (not available yet)")
        for e in self.failed:
            self._print(f"  ✘ [{e.scenario}] {e.what}: {e.detail}")
        for e in self.skipped:
            self._print(f"  ○ [{e.scenario}] {e.what}: {e.detail}")
