"""PII pseudonymization: detection, stable aliases, JSON tool results, sealing, resolution (no I/O)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from services.runner.budget import ModelPrice, RunLimits
from services.runner.context import PromptDraft
from services.runner.interceptors import default_interceptors
from services.runner.loop import AgentLoop, LoopConfig
from services.runner.outcome import HandoffRequest, LoopOutcome, OutcomeKind
from services.runner.pii import PiiInterceptor, PiiToolBox, Pseudonymizer, SealedRequest
from services.runner.providers.base import (
    AssistantMessage,
    CredentialSource,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    ProviderAccess,
    StopReason,
    SystemLayer,
    TokenUsage,
    ToolCallRequest,
    ToolOutcome,
    ToolResults,
    ToolSpec,
    UserMessage,
)
from switchboard.contracts.enums import HandoffTrigger, Urgency


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("write to maria.rossi@example.com please", "write to <email_1> please"),
        ("MARIA.ROSSI@example.com and maria.rossi@example.com", "<email_1> and <email_1>"),
        ("call +393331234567", "call <phone_1>"),
        ("call +39 333 123 4567 or 333-123-4567", "call <phone_1> or <phone_1>"),
        ("(555) 123-4567", "<phone_1>"),
        ("ligue 011 98888-7777", "ligue <phone_1>"),
        ("chat 5511999999999@c.us", "chat <email_1>"),
        # Not phone numbers: dates, times, short numbers, ids, timestamps.
        ("on 2026-11-30 at 10:30", "on 2026-11-30 at 10:30"),
        ("on 30/11/2026", "on 30/11/2026"),
        ("order 12345, 3 items, total 1.234,50", "order 12345, 3 items, total 1.234,50"),
        ("id 8a0c1b2e-1234-4567-8901-123456789012", "id 8a0c1b2e-1234-4567-8901-123456789012"),
        ("at 2026-11-30T07:00:00.123456+00:00", "at 2026-11-30T07:00:00.123456+00:00"),
        # The conversation's contact, in full and by a part of the name, any case.
        ("I am Maria Rossi", "I am <contact_1>"),
        ("sono maria, ciao", "sono <contact_1>, ciao"),
        ("Mariangela is someone else", "Mariangela is someone else"),
    ],
)
def test_text_is_pseudonymized(text: str, expected: str) -> None:
    assert Pseudonymizer(names=["Maria Rossi"]).text(text) == expected


def test_a_phone_or_address_shown_as_the_display_name_is_not_a_name() -> None:
    pii = Pseudonymizer(names=["+55 11 98888-7777", "ana@x.com", "Bruno"])
    assert pii.text("+55 11 98888-7777 paid 7777 to Bruno") == "<phone_1> paid 7777 to <contact_1>"


def test_aliases_are_stable_per_run_and_resolve_to_the_first_spelling() -> None:
    pii = Pseudonymizer(names=["Ana Souza"])
    first = pii.text("Ana: ana@x.com, +55 11 98888-7777")
    second = pii.text("again ANA@X.COM and 5511988887777")
    assert first == "<contact_1>: <email_1>, <phone_1>"
    assert second == "again <email_1> and <phone_1>"
    assert pii.reveal("<contact_1> <email_1> <phone_1> <phone_9>") == "Ana Souza ana@x.com +55 11 98888-7777 <phone_9>"
    # Another run starts from scratch: aliases are per run.
    assert Pseudonymizer().text("bob@x.com") == "<email_1>"


def test_tool_json_learns_contact_names_and_keeps_ids() -> None:
    pii = Pseudonymizer()
    result = json.dumps(
        {
            "contacts": [
                {"contact_id": "c-1", "name": "José Álvarez", "phone": "+5511988887777", "email": "jose@ex.com"},
                {"contact_id": "c-2", "name": None, "phone": None, "email": None},
            ],
            "product": {"name": "Premium plan"},
        }
    )
    masked = json.loads(pii.tool_result(result))
    assert masked["contacts"][0] == {
        "contact_id": "c-1",
        "name": "<contact_1>",
        "phone": "<phone_1>",
        "email": "<email_1>",
    }
    assert masked["contacts"][1]["name"] is None
    assert masked["product"] == {"name": "Premium plan"}  # not a contact object
    # Learned: the name is now masked in free text (history messages, later results).
    assert pii.text("José said Álvarez called") == "<contact_1> said <contact_1> called"
    history = json.dumps({"messages": [{"message_id": "m-1", "text": "mail me at jose@ex.com"}], "next_before": None})
    assert json.loads(pii.tool_result(history))["messages"][0] == {"message_id": "m-1", "text": "mail me at <email_1>"}
    assert pii.tool_result("plain error for +5511988887777") == "plain error for <phone_1>"


def test_seal_covers_every_text_of_a_request() -> None:
    pii = Pseudonymizer(names=["Ana Souza"])
    request = ModelRequest(
        model="m",
        system=(SystemLayer("Conversation", "The customer's name is Ana Souza."),),
        messages=(
            UserMessage("hi, ana@x.com"),
            AssistantMessage("", (ToolCallRequest.parse("c1", "t", {"q": "+5511988887777"}),), provider_state="raw"),
            ToolResults((ToolOutcome("c1", "t", '{"email": "ana@x.com"}'),), notes=("customer: call Ana",)),
        ),
        tools=(),
        max_output_tokens=10,
    )
    sealed = pii.seal(request)
    assert isinstance(sealed, SealedRequest)
    blob = repr(sealed)
    for raw in ("Ana", "ana@x.com", "5511988887777"):
        assert raw not in blob
    assistant = sealed.messages[1]
    assert isinstance(assistant, AssistantMessage) and assistant.provider_state is None
    # An assistant turn without PII keeps the provider's verbatim state.
    clean = AssistantMessage("ok <contact_1>", provider_state="keep")
    assert pii.seal(dataclass_replace(request, messages=(clean,))).messages[0] is clean


def dataclass_replace(request: ModelRequest, **changes: Any) -> ModelRequest:
    values = {"model": request.model, "system": request.system, "messages": request.messages, "tools": request.tools}
    return ModelRequest(**{**values, "max_output_tokens": request.max_output_tokens, **changes})


def test_a_sealed_request_is_made_only_by_the_pseudonymizer() -> None:
    with pytest.raises(TypeError):
        SealedRequest(model="m", system=(), messages=(UserMessage("ana@x.com"),), tools=(), max_output_tokens=1)


def test_outcome_and_calls_get_real_values_back() -> None:
    pii = Pseudonymizer(names=["Ana Souza"])
    pii.text("ana@x.com +5511988887777")
    call = ToolCallRequest.parse("c", "crm_send_whatsapp_message", {"text": "Hi <contact_1>, <email_1>", "n": 1})
    assert dict(pii.reveal_call(call).arguments) == {"text": "Hi Ana Souza, ana@x.com", "n": 1}
    outcome = LoopOutcome(
        OutcomeKind.HANDOFF,
        final_text="Ciao <contact_1>, ti chiamo al <phone_1>",
        handoff=HandoffRequest("<contact_1> wants a person", Urgency.NORMAL, HandoffTrigger.TOOL),
    )
    revealed = pii.reveal_outcome(outcome)
    assert revealed.final_text == "Ciao Ana Souza, ti chiamo al +5511988887777"
    assert revealed.handoff is not None and revealed.handoff.reason == "Ana Souza wants a person"


# ---------------------------------------------------------------- the loop never sends raw PII


class RecordingProvider(ModelProvider):
    name = "fake"

    def __init__(self, replies: list[ModelResponse]) -> None:
        self.replies = replies
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest, access: ProviderAccess, *, timeout_s: float) -> ModelResponse:
        self.requests.append(request)
        return self.replies.pop(0)


SEND = ToolSpec("crm_send_whatsapp_message", "send", {"type": "object"})


@dataclass
class CrmTools:
    calls: list[ToolCallRequest] = field(default_factory=list)

    async def specs(self) -> tuple[ToolSpec, ...]:
        return (SEND,)

    async def call(self, call: ToolCallRequest, *, timeout_s: float) -> ToolOutcome:
        self.calls.append(call)
        found = {"contacts": [{"contact_id": "c-9", "name": "Bruno Lima", "email": "bruno@lima.com"}]}
        return ToolOutcome(call.id, call.name, json.dumps(found))


class Events:
    def __getattr__(self, name: str) -> Any:
        return lambda *args: None


@dataclass
class Trace:
    entries: list[dict[str, Any]] = field(default_factory=list)

    async def append(
        self, entries: list[dict[str, Any]], *, steps: int, usage: TokenUsage, cost: int, final: bool = False
    ) -> None:
        self.entries.extend(entries)


class Quiet:
    interrupted = False

    def drain(self) -> list[str]:
        return ["also, my other number is +39 06 1234 5678"]


async def test_the_loop_seals_every_request_and_tools_get_real_values() -> None:
    pii = Pseudonymizer(names=["Ana Souza"])
    provider = RecordingProvider(
        [
            ModelResponse(
                "",
                (ToolCallRequest.parse("c1", SEND.name, {"text": "Olá <contact_1>, confirmo <email_1>"}),),
                TokenUsage(),
                StopReason.TOOL_USE,
            ),
            ModelResponse("Feito, <contact_1>!", (), TokenUsage(), StopReason.END_TURN),
        ]
    )
    tools = CrmTools()
    trace = Trace()
    loop = AgentLoop(
        config=LoopConfig("m", RunLimits(5, 100_000, 1_000_000, 256, 16), ModelPrice(), 5.0, 5.0, 60.0),
        provider=provider,
        access=ProviderAccess(CredentialSource.NONE, None),
        tools=PiiToolBox(tools, pii),
        events=Events(),
        trace=trace,
        steering=Quiet(),
        interceptors=[*default_interceptors(), PiiInterceptor(pii)],
        pii=pii,
    )
    draft = PromptDraft(
        (SystemLayer("Conversation", "The customer's name is Ana Souza."),),
        (UserMessage("Sou Ana, meu email é ana@souza.com e telefone +55 11 98888-7777"),),
        (SEND,),
    )
    outcome = pii.reveal_outcome(await loop.run(draft))

    sent = json.dumps([repr(r) for r in provider.requests])
    assert all(isinstance(r, SealedRequest) for r in provider.requests)
    for raw in ("Ana", "Souza", "ana@souza.com", "98888", "Bruno", "bruno@lima.com", "1234 5678"):
        assert raw not in sent, raw
    # The write tool acted on the real values; the customer gets real values; the trace keeps aliases.
    assert tools.calls[0].arguments["text"] == "Olá Ana Souza, confirmo ana@souza.com"
    assert outcome.final_text == "Feito, Ana Souza!"
    stored = json.dumps(trace.entries, ensure_ascii=False)
    assert "bruno@lima.com" not in stored and "Ana Souza" not in stored and "<email_2>" in stored


@pytest.mark.parametrize(
    ("display_name", "text", "expected"),
    [
        ("Maria Silva 2", "oi, sou a Maria Silva", "oi, sou a <contact_1>"),
        ("Ana (loja 3)", "Ana pagou 3 reais", "<contact_1> pagou 3 reais"),
        ("Bia @ Salão", "fala com a Bia do Salão", "fala com a <contact_1> do <contact_1>"),
        ("Joana Prado 2", "The customer's name is Joana Prado 2.", "The customer's name is <contact_1> 2."),
    ],
)
def test_a_display_name_next_to_a_number_or_an_address_still_masks_the_name(
    display_name: str, text: str, expected: str
) -> None:
    """WhatsApp display names often carry a number or a shop tag ("Maria Silva 2"): the name's words
    are learned, the number's are left to the phone patterns (they would mask prices)."""
    assert Pseudonymizer(names=[display_name]).text(text) == expected


@pytest.mark.parametrize(
    ("name", "written"),
    [("Straße", "STRAßE e straße"), ("İrem Kaya", "İrem e İREM"), ("Ömer", "ÖMER e ömer")],
)
def test_names_whose_case_folding_changes_their_length_are_masked_as_written(name: str, written: str) -> None:
    masked = Pseudonymizer(names=[name]).text(written)
    assert "<contact_1>" in masked and not any(part in masked for part in name.split())
