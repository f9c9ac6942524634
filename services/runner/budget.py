"""Per-run limits checked *before* every model call, so a run never starts a step it cannot afford.

Three limits [004 §6.1 prepareStep, SPEC §9]: ``max_steps``, the token budget
and the cost budget. Before each step the guard takes what the run has used so
far and the worst case of the next step:

- **input**: the next request is the previous one plus what was appended since
  (the previous answer and the tool results / notes). The previous request's
  input and the previous answer's output are known exactly from the reported
  usage; only the appended text is estimated, at one token per 3 bytes of
  UTF-8 (tokenizers average ~4 characters per token on English and JSON; 3
  bytes also covers accented and CJK text, which is 2 or 3 bytes per character).
  The first request is estimated entirely that way;
- **output**: at most the step's ``max_output_tokens`` — a hard cap the provider
  enforces.

The step's output cap is then lowered to what the remaining budgets can pay
for (``tokens left``, and ``cost left / output price``). If even
``min_output_tokens`` does not fit, the run stops *before* the call with
``token_budget_exceeded`` or ``cost_budget_exceeded``. Since reported input ≤
estimated input and output ≤ the cap, the budget is never exceeded by a step
(only by a provider that reports more input than it was sent).

Costs are integer micro-USD: ``tokens * price_per_million // 1_000_000``
(docs/database.md "Money"). A model without a catalog price costs 0 [003
principle 4], so only the token budget and ``max_steps`` bound it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from services.runner.providers.base import TokenUsage

MICROS_PER_MILLION_TOKENS = 1_000_000
BYTES_PER_TOKEN_ESTIMATE = 3
MESSAGE_OVERHEAD_TOKENS = 8


def estimate_tokens(text: str) -> int:
    """A deliberately high estimate of the tokens of ``text`` (see the module docstring)."""
    return math.ceil(len(text.encode()) / BYTES_PER_TOKEN_ESTIMATE) + MESSAGE_OVERHEAD_TOKENS


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """Catalog prices in micro-USD per million tokens; ``None`` = unknown (cost 0).

    The catalog has one input price; cache reads and writes are billed at it
    unless the catalog gives them their own (``attributes`` keys
    ``cache_read_micros_per_mtok`` / ``cache_write_micros_per_mtok``).
    """

    input_micros_per_mtok: int | None = None
    output_micros_per_mtok: int | None = None
    cache_read_micros_per_mtok: int | None = None
    cache_write_micros_per_mtok: int | None = None
    # The model thinks before it answers (catalog ``reasoning``): its thinking is billed as
    # output and counts against the output cap, so its steps need a larger cap.
    reasoning: bool = False

    @property
    def known(self) -> bool:
        return self.input_micros_per_mtok is not None or self.output_micros_per_mtok is not None

    @property
    def input(self) -> int:
        return self.input_micros_per_mtok or 0

    @property
    def output(self) -> int:
        return self.output_micros_per_mtok or 0

    def cost(self, usage: TokenUsage) -> int:
        """Micro-USD for ``usage`` (floor of the exact total)."""
        read = self.input if self.cache_read_micros_per_mtok is None else self.cache_read_micros_per_mtok
        write = self.input if self.cache_write_micros_per_mtok is None else self.cache_write_micros_per_mtok
        total = (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_tokens * read
            + usage.cache_write_tokens * write
        )
        return total // MICROS_PER_MILLION_TOKENS

    def worst_input_cost(self, tokens: int) -> int:
        """Upper bound of ``tokens`` of input, whichever way the provider bills them."""
        rate = max(self.input, self.cache_read_micros_per_mtok or 0, self.cache_write_micros_per_mtok or 0)
        return math.ceil(tokens * rate / MICROS_PER_MILLION_TOKENS)

    def output_cost(self, tokens: int) -> int:
        """Upper bound of ``tokens`` of output."""
        return math.ceil(tokens * self.output / MICROS_PER_MILLION_TOKENS)


@dataclass(frozen=True, slots=True)
class RunLimits:
    max_steps: int
    token_budget: int
    cost_budget_micros: int
    max_output_tokens: int
    min_output_tokens: int
    # Added to ``max_output_tokens`` when the step's model reasons (``ModelPrice.reasoning``):
    # decided per model at admission, so a sub-agent on another model gets its own.
    reasoning_allowance_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Admission:
    """The next step may run with at most ``max_output_tokens``; or ``refusal`` says why not."""

    max_output_tokens: int = 0
    refusal: str | None = None
    projected_cost_micros: int = 0

    @property
    def admitted(self) -> bool:
        return self.refusal is None


MAX_STEPS_REACHED = "max_steps_reached"
TOKEN_BUDGET_EXCEEDED = "token_budget_exceeded"
COST_BUDGET_EXCEEDED = "cost_budget_exceeded"


def helper_output(price: ModelPrice, answer_tokens: int, reasoning_allowance_tokens: int) -> tuple[int, int]:
    """``(max_output_tokens, reasoning_tokens)`` of a helper call (classification, a summary) whose
    answer needs ``answer_tokens``: a reasoning model gets the allowance a run's steps get
    (``RUNNER_REASONING_ALLOWANCE_TOKENS``) on top, at most half of it all for thinking."""
    cap = answer_tokens + (reasoning_allowance_tokens if price.reasoning else 0)
    return cap, reasoning_share(price, cap)


def reasoning_share(price: ModelPrice, max_output_tokens: int) -> int:
    """Of a step's output cap, what a reasoning model may spend thinking: half, so the answer
    keeps the other half (0 for a model that does not reason: nothing is sent)."""
    return max_output_tokens // 2 if price.reasoning else 0


def admit_step(
    limits: RunLimits,
    price: ModelPrice,
    *,
    steps_done: int,
    used: TokenUsage,
    cost_micros: int,
    next_input_tokens: int,
) -> Admission:
    """Whether the next step may start, and with which output cap (a pure function)."""
    if steps_done >= limits.max_steps:
        return Admission(refusal=MAX_STEPS_REACHED)
    cap = limits.max_output_tokens + (limits.reasoning_allowance_tokens if price.reasoning else 0)
    tokens_left = limits.token_budget - used.total - next_input_tokens
    cap = min(cap, tokens_left)
    if cap < limits.min_output_tokens:
        return Admission(refusal=TOKEN_BUDGET_EXCEEDED)
    if price.known:
        cost_left = limits.cost_budget_micros - cost_micros - price.worst_input_cost(next_input_tokens)
        if price.output > 0:
            affordable = cost_left * MICROS_PER_MILLION_TOKENS // price.output if cost_left > 0 else 0
            cap = min(cap, affordable)
        elif cost_left < 0:
            cap = 0
        if cap < limits.min_output_tokens:
            return Admission(refusal=COST_BUDGET_EXCEEDED)
    projected = cost_micros + price.worst_input_cost(next_input_tokens) + price.output_cost(cap)
    return Admission(max_output_tokens=cap, projected_cost_micros=projected)
