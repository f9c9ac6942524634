"""Memory in the prompt (issue 6 item 2): the full-text query, the long-term memory layer and where it
sits, the summarization request and the demo model's deterministic summary. Pure, no I/O."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from services.runner.budget import ModelPrice
from services.runner.context import compose, default_builders
from services.runner.memory import LABEL, FactRetriever, RetrievedFact, fact_query, with_memory
from services.runner.pii import Pseudonymizer
from services.runner.providers.demo import SUMMARY_LABEL, demo_reply
from services.runner.subject import HistoryItem
from services.runner.summary import INSTRUCTIONS, nothing_left_the_window, summary_request, transcript
from tests.unit.runner.test_context import LABELS, subject


class FakeRetriever(FactRetriever):
    def __init__(self, facts: list[RetrievedFact]) -> None:
        self.facts = facts
        self.asked: list[tuple[uuid.UUID, uuid.UUID, str]] = []

    async def relevant(self, org_id: uuid.UUID, contact_id: uuid.UUID, about: str) -> list[RetrievedFact]:
        self.asked.append((org_id, contact_id, about))
        return self.facts


def items(*texts: tuple[str, str]) -> list[HistoryItem]:
    base = datetime.now(UTC)
    return [HistoryItem(uuid.uuid4(), d, t, base + timedelta(seconds=i)) for i, (d, t) in enumerate(texts)]


def test_fact_query_ors_significant_words_as_prefixes_and_drops_operators() -> None:
    assert fact_query("Can you DELIVER on Saturday? The usual!") == "deliv:* | saturd:* | usual:*"
    # Only letters and digits reach to_tsquery: operators and quotes in user text cannot inject syntax.
    assert fact_query("a & b | !c <-> 'x' :*") is None
    assert fact_query("entrega amanhã 10h, ok?") == "entre:* | aman:* | 10h"
    assert fact_query("the and for") is None


async def test_long_term_memory_layer_sits_after_the_summary_and_quotes_each_fact() -> None:
    run = subject()
    retriever = FakeRetriever(
        [RetrievedFact("Prefers Saturday deliveries", "contact", 0.5), RetrievedFact("Closed on Sundays", "org", 0.1)]
    )
    draft = await compose(run, [], with_memory(default_builders(), retriever))
    labels = [layer.label for layer in draft.system]
    assert labels == [*LABELS[: LABELS.index("Memory") + 1], LABEL, *LABELS[LABELS.index("Memory") + 1 :]]
    text = {layer.label: layer.text for layer in draft.system}[LABEL]
    assert text.splitlines()[1:] == [
        "- (this customer) Prefers Saturday deliveries",
        "- (the business) Closed on Sundays",
    ]
    assert retriever.asked == [(run.request.org_id, run.request.contact_id, "new")]


async def test_no_relevant_fact_no_layer() -> None:
    draft = await compose(subject(), [], with_memory(default_builders(), FakeRetriever([])))
    assert LABEL not in [layer.label for layer in draft.system]


def test_summary_request_carries_task_previous_summary_and_labeled_transcript() -> None:
    batch = items(("inbound", "Oi,  quero  saber o preço"), ("outbound", "Claro!"))
    request = summary_request("m", "Earlier: asked about hours.", batch)
    assert [(layer.label, layer.text) for layer in request.system] == [
        ("Summarization task", INSTRUCTIONS),
        ("Previous summary", "Earlier: asked about hours."),
    ]
    assert request.tools == () and request.model == "m"
    assert transcript(batch) == "Customer: Oi, quero saber o preço\nAgent: Claro!"


def test_demo_model_answers_a_summary_request_with_a_deterministic_labeled_summary() -> None:
    batch = items(("inbound", "first"), ("outbound", "ok"), ("inbound", "second"), ("inbound", "third"))
    request = Pseudonymizer().seal(summary_request("demo", None, batch))
    first, again = demo_reply(request), demo_reply(request)
    assert first.text == again.text and not first.tool_calls
    assert first.text == (
        f"{SUMMARY_LABEL} 4 earlier message(s) summarized: 3 from the customer, 1 from the agent. "
        'The customer\'s latest lines: "first"; "second"; "third".'
    )
    continued = demo_reply(summary_request("demo", "before", batch))
    assert "(continues an earlier summary)" in continued.text


def test_summary_request_is_pseudonymized_when_sealed() -> None:
    request = summary_request("m", "Ana Souza asked", items(("inbound", "sou Ana, ana@example.com +55 11 91234-5678")))
    sealed = Pseudonymizer(names=["Ana Souza"]).seal(request)
    everything = " ".join([*(layer.text for layer in sealed.system), *(m.text for m in sealed.messages)])  # type: ignore[union-attr]
    assert "Ana" not in everything and "ana@example.com" not in everything and "91234" not in everything


def test_a_short_conversation_needs_no_summary_job_and_a_long_one_does() -> None:
    """``nothing_left_the_window``: with every message loaded (fewer than the claim asked for) and all
    inside the windows, no job (no transaction); when the claim got as many as it asked for, or a
    window is full, the job looks itself."""
    short = items(*[("inbound", f"message {i}") for i in range(5)])
    assert nothing_left_the_window(subject(tuple(short), window=10))
    # The claim asks for window + inbound messages + 1 = 7 with a window of 5: 7 back means maybe more.
    full = items(*[("inbound", f"message {i}") for i in range(7)])
    assert not nothing_left_the_window(subject(tuple(full), window=5))
    # Few messages, but longer than the token window: the oldest left it.
    long_texts = items(*[("inbound", "word " * 400) for _ in range(3)])
    assert not nothing_left_the_window(subject(tuple(long_texts), window=10, token_window=500))
    # A version without history window loads none: the job decides.
    assert not nothing_left_the_window(subject((), window=0))


def test_a_summary_by_a_reasoning_model_has_room_to_think_and_keeps_its_answer_cap() -> None:
    batch = items(("inbound", "Quero trocar o tamanho"))
    plain = summary_request("claude-sonnet-4-6", None, batch, ModelPrice())
    reasoning = summary_request("gpt-5-mini", None, batch, ModelPrice(reasoning=True), reasoning_allowance_tokens=4000)
    assert (plain.max_output_tokens, plain.reasoning_tokens) == (800, 0)
    assert (reasoning.max_output_tokens, reasoning.reasoning_tokens) == (4800, 2400), "the runner's setting"
