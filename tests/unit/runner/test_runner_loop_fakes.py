"""The loop, the context pipeline and the supervisor with fakes: no network, no broker, no database."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from services.runner.budget import ModelPrice, RunLimits
from services.runner.context import PromptDraft, compose, default_builders
from services.runner.interceptors import default_interceptors
from services.runner.loop import AgentLoop, LoopConfig, RetryPolicy
from services.runner.outcome import OutcomeKind
from services.runner.providers.base import (
    AssistantMessage,
    CredentialSource,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    ProviderAccess,
    ProviderError,
    ProviderErrorKind,
    StopReason,
    SystemLayer,
    TokenUsage,
    ToolCallRequest,
    ToolOutcome,
    ToolResults,
    ToolSpec,
    UserMessage,
)
from services.runner.steering import RunSteering, SteeringRouter
from services.runner.subject import ConversationInfo, HistoryItem, RunSubject, VersionConfig
from services.runner.tools.base import ToolServerUnavailable
from switchboard.contracts import InboundMessage, RunRequested, SteeringMessage, WakeContext
from switchboard.contracts.enums import ErrorFamily, SteeringKind, WakeReason

SEARCH = ToolSpec(
    "search", "search things", {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
)

Script = Callable[[ModelRequest], ModelResponse]


def answer(text: str, **usage: int) -> ModelResponse:
    return ModelResponse(text, (), TokenUsage(**usage), StopReason.END_TURN)


def call(q: str, **usage: int) -> ModelResponse:
    return ModelResponse(
        "",
        (ToolCallRequest.parse(f"c-{q}-{uuid.uuid4().hex[:4]}", "search", {"q": q}),),
        TokenUsage(**usage),
        StopReason.TOOL_USE,
    )


class FakeProvider(ModelProvider):
    name = "fake"

    def __init__(self, script: list[ModelResponse | Exception | float] | Script) -> None:
        self.script = script
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest, access: ProviderAccess, *, timeout_s: float) -> ModelResponse:
        self.requests.append(request)
        if callable(self.script):
            return self.script(request)
        item = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(item, float):
            await asyncio.sleep(item)
            return answer("slow")
        if isinstance(item, Exception):
            raise item
        return item


@dataclass
class FakeTools:
    delay_s: float = 0.0
    down: bool = False
    calls: list[ToolCallRequest] = field(default_factory=list)

    async def specs(self) -> tuple[ToolSpec, ...]:
        return (SEARCH,)

    async def call(self, call: ToolCallRequest, *, timeout_s: float) -> ToolOutcome:
        if self.down:
            raise ToolServerUnavailable("down")
        self.calls.append(call)
        await asyncio.sleep(self.delay_s)
        return ToolOutcome(call.id, call.name, f"results for {call.arguments.get('q')}")

    async def aclose(self) -> None:
        return None


class Events:
    def __init__(self) -> None:
        self.items: list[tuple[str, Any]] = []

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args: self.items.append((name, args))


@dataclass
class Trace:
    entries: list[dict[str, Any]] = field(default_factory=list)

    async def append(
        self, entries: list[dict[str, Any]], *, steps: int, usage: TokenUsage, cost: int, final: bool = False
    ) -> None:
        self.entries.extend(entries)


def make_loop(
    provider: FakeProvider,
    tools: FakeTools | None = None,
    *,
    steering: RunSteering | None = None,
    silence_s: float = 30.0,
    limits: RunLimits | None = None,
    price: ModelPrice | None = None,
) -> tuple[AgentLoop, Trace, Events]:
    trace, events = Trace(), Events()
    loop = AgentLoop(
        config=LoopConfig(
            model="m",
            limits=limits or RunLimits(10, 100_000, 1_000_000, 1024, 64),
            price=price or ModelPrice(1_000_000, 5_000_000),
            call_timeout_s=5,
            tool_timeout_s=5,
            silence_timeout_s=silence_s,
            retry=RetryPolicy(max_attempts=3, initial_backoff_s=0.01, max_backoff_s=0.05),
        ),
        provider=provider,
        access=ProviderAccess(CredentialSource.NONE, None),
        tools=tools or FakeTools(),
        events=events,  # type: ignore[arg-type]
        trace=trace,
        steering=steering or RunSteering(),
        interceptors=default_interceptors(),
    )
    return loop, trace, events


DRAFT = PromptDraft((SystemLayer("Instructions", "be brief"),), (UserMessage("hi"),), (SEARCH,))


async def test_usage_and_cost_are_summed_over_every_step() -> None:
    provider = FakeProvider(
        [call("a", input_tokens=100, output_tokens=10), answer("done", input_tokens=200, output_tokens=20)]
    )
    loop, trace, _ = make_loop(provider)
    outcome = await loop.run(DRAFT)
    assert outcome.kind is OutcomeKind.ANSWERED and outcome.final_text == "done"
    assert outcome.usage == TokenUsage(300, 30)
    assert outcome.cost_micros == (300 * 1_000_000 + 30 * 5_000_000) // 1_000_000
    assert [e["kind"] for e in trace.entries] == ["model", "tool", "model"]


async def test_silence_watchdog_aborts_a_run_that_produces_nothing() -> None:
    loop, trace, _ = make_loop(FakeProvider([2.0]), silence_s=0.2)
    outcome = await loop.run(DRAFT)
    assert outcome.kind is OutcomeKind.ABORTED and outcome.abort_reason == "silence_timeout"
    assert any(e.get("name") == "silence_watchdog" for e in trace.entries)


async def test_silence_watchdog_during_a_tool_call_still_records_its_result() -> None:
    loop, trace, _ = make_loop(FakeProvider([call("a"), answer("x")]), FakeTools(delay_s=2.0), silence_s=0.3)
    outcome = await loop.run(DRAFT)
    assert outcome.abort_reason == "silence_timeout"
    tool = [e for e in trace.entries if e["kind"] == "tool"]
    assert tool and tool[0]["error"] == "not completed: silence timeout"


async def test_output_keeps_the_watchdog_quiet() -> None:
    script = [call(str(i)) for i in range(4)] + [answer("done")]
    loop, _, _ = make_loop(FakeProvider(script), FakeTools(delay_s=0.1), silence_s=0.35)
    assert (await loop.run(DRAFT)).kind is OutcomeKind.ANSWERED


async def test_retry_after_is_honored_then_the_call_succeeds() -> None:
    provider = FakeProvider(
        [ProviderError(ProviderErrorKind.RATE_LIMITED, provider="fake", retry_after_s=0.02), answer("ok")]
    )
    loop, trace, events = make_loop(provider)
    outcome = await loop.run(DRAFT)
    assert outcome.final_text == "ok" and trace.entries[0]["attempts"] == 2
    assert any(name == "debug" and args[0] == "provider_retry" for name, args in events.items)


async def test_invalid_key_is_not_retried() -> None:
    provider = FakeProvider([ProviderError(ProviderErrorKind.AUTH, provider="fake", status=401)])
    loop, _, _ = make_loop(provider)
    outcome = await loop.run(DRAFT)
    assert outcome.kind is OutcomeKind.FAILED and outcome.failure is not None
    assert outcome.failure.code == "provider_auth_invalid" and len(provider.requests) == 1


async def test_per_call_timeout_counts_as_a_retryable_timeout() -> None:
    loop, trace, _ = make_loop(FakeProvider([10.0]))
    loop._config = dataclasses.replace(loop._config, call_timeout_s=0.05)
    outcome = await loop.run(DRAFT)
    assert outcome.failure is not None and outcome.failure.code == "provider_timeout"
    assert outcome.failure.family is ErrorFamily.TRANSIENT_UPSTREAM and trace.entries[0]["attempts"] == 3


async def test_interrupt_between_tool_calls_leaves_no_call_without_a_result() -> None:
    steering = RunSteering()
    two_calls = ModelResponse(
        "",
        (ToolCallRequest.parse("c1", "search", {"q": "a"}), ToolCallRequest.parse("c2", "search", {"q": "b"})),
        TokenUsage(),
        StopReason.TOOL_USE,
    )

    class InterruptingTools(FakeTools):
        async def call(self, call: ToolCallRequest, *, timeout_s: float) -> ToolOutcome:
            steering.deliver(
                SteeringMessage(
                    org_id=uuid.uuid4(),
                    conversation_id=uuid.uuid4(),
                    run_id=uuid.uuid4(),
                    kind=SteeringKind.INTERRUPT,
                    text="",
                )
            )
            return await super().call(call, timeout_s=timeout_s)

    tools = InterruptingTools()
    loop, trace, _ = make_loop(FakeProvider([two_calls, answer("never")]), tools, steering=steering)
    outcome = await loop.run(DRAFT)
    assert outcome.abort_reason == "interrupted"
    assert len(tools.calls) == 1
    results = [e for e in trace.entries if e["kind"] == "tool"]
    assert [r["tool_call_id"] for r in results] == ["c1", "c2"] and "interrupted" in results[1]["result"]


async def test_steering_guidance_is_delivered_with_the_tool_results() -> None:
    steering = RunSteering()
    steering.deliver(
        SteeringMessage(
            org_id=uuid.uuid4(),
            conversation_id=uuid.uuid4(),
            run_id=uuid.uuid4(),
            kind=SteeringKind.GUIDANCE,
            text="use Bruno",
        )
    )
    provider = FakeProvider([call("a"), answer("ok")])
    loop, _, _ = make_loop(provider, steering=steering)
    await loop.run(DRAFT)
    first = provider.requests[0].messages[-1]
    assert isinstance(first, UserMessage) and "use Bruno" in first.text


async def test_tool_server_down_mid_run_hands_off() -> None:
    loop, _, _ = make_loop(FakeProvider([call("a")]), FakeTools(down=True))
    outcome = await loop.run(DRAFT)
    assert outcome.kind is OutcomeKind.HANDOFF and outcome.failure is not None
    assert outcome.failure.family is ErrorFamily.TOOL_FAILURE


async def test_unknown_tool_gets_an_error_result() -> None:
    bad = ModelResponse("", (ToolCallRequest.parse("c1", "drop_tables", {}),), TokenUsage(), StopReason.TOOL_USE)
    provider = FakeProvider([bad, answer("sorry")])
    loop, _, _ = make_loop(provider)
    assert (await loop.run(DRAFT)).final_text == "sorry"
    results = provider.requests[1].messages[-1]
    assert isinstance(results, ToolResults) and results.results[0].is_error
    assert "Unknown tool" in results.results[0].content


# ---------------------------------------------------------------- context


def _subject(history: tuple[HistoryItem, ...], *, window: int = 20, token_window: int = 8000) -> RunSubject:
    now = datetime.now(UTC)
    request = RunRequested(
        org_id=uuid.uuid4(),
        conversation_id=uuid.uuid4(),
        contact_id=uuid.uuid4(),
        channel_session_id=uuid.uuid4(),
        run_id=uuid.uuid4(),
        agent_id=uuid.uuid4(),
        version_id=uuid.uuid4(),
        wake_reason=WakeReason.USER_MESSAGE,
        wake_context=WakeContext(),
        messages=(InboundMessage(message_id=uuid.uuid4(), external_id="x", chat_id="c", text="new", received_at=now),),
    )
    version = VersionConfig(
        id=request.version_id,
        agent_id=request.agent_id,
        version_number=1,
        system_prompt="Be kind.",
        provider="anthropic",
        model="m",
        credential_id=None,
        tool_ids=(),
        max_steps=3,
        token_budget=5000,
        cost_budget_micros=10_000,
        history_message_window=window,
        history_token_window=token_window,
        handoff_keywords=(),
        handoff_tool_enabled=False,
    )
    conversation = ConversationInfo(uuid.uuid4(), "c", request.channel_session_id, "Ana")
    return RunSubject(request, "Bot", version, conversation, history)


def _history(*texts: tuple[str, str]) -> tuple[HistoryItem, ...]:
    base = datetime.now(UTC)
    items = [
        HistoryItem(uuid.uuid4(), d, t, base - timedelta(minutes=len(texts) - i)) for i, (d, t) in enumerate(texts)
    ]
    return tuple(reversed(items))  # newest first, as loaded


async def test_prompt_layers_and_history_in_order() -> None:
    subject = _subject(_history(("outbound", "welcome"), ("inbound", "a"), ("inbound", "b"), ("outbound", "c")))
    draft = await compose(subject, [SEARCH], default_builders())
    labels = [layer.label for layer in draft.system]
    assert labels == ["Identity", "Tools", "System prompt", "Run contract", "Wake context", "Conversation"]
    assert "search" in draft.system[1].text and "Ana" in draft.system[-1].text
    # Starts with the customer, alternates (consecutive customer messages merged), ends with the new message.
    assert [type(m).__name__ for m in draft.messages] == ["UserMessage", "AssistantMessage", "UserMessage"]
    assert draft.messages[0].text == "a\nb"  # type: ignore[union-attr]
    assert isinstance(draft.messages[-1], UserMessage) and draft.messages[-1].text == "new"


async def test_tool_catalog_never_names_a_tool_the_run_lacks() -> None:
    draft = await compose(_subject(()), [], default_builders())
    assert "no tools" in draft.system[1].text


async def test_history_windows_bound_what_the_model_sees() -> None:
    long = tuple(("inbound" if i % 2 else "outbound", f"message {i} " + "x" * 300) for i in range(40))
    by_count = await compose(_subject(_history(*long), window=4), [], default_builders())
    assert len(by_count.messages) <= 5
    by_tokens = await compose(_subject(_history(*long), token_window=300), [], default_builders())
    assert len(by_tokens.messages) <= 3


# ---------------------------------------------------------------- steering and supervisor


def test_steering_that_arrives_before_its_run_is_handed_over() -> None:
    inboxes: dict[uuid.UUID, RunSteering] = {}
    router = SteeringRouter(inboxes.get)
    run_id = uuid.uuid4()
    message = SteeringMessage(
        org_id=uuid.uuid4(), conversation_id=uuid.uuid4(), run_id=run_id, kind=SteeringKind.GUIDANCE, text="early"
    )
    router.route(message)
    router.route(message)  # a duplicate is delivered once
    inbox = RunSteering()
    inboxes[run_id] = inbox
    router.adopt(run_id, inbox)
    assert inbox.drain() == ["early"] and inbox.drain() == []


async def test_supervisor_reports_no_room_at_the_cap() -> None:
    from services.runner.runtime import RunSupervisor

    release = asyncio.Event()

    class Executor:
        async def execute(self, handle: Any) -> None:
            await release.wait()

    supervisor = RunSupervisor(Executor(), max_in_flight=2)  # type: ignore[arg-type]
    subject = _subject(())
    for _ in range(2):
        supervisor.start(subject.request.model_copy(update={"run_id": uuid.uuid4()}))
    assert supervisor.start(subject.request.model_copy(update={"run_id": uuid.uuid4()})) is not None
    assert supervisor.room() == -1
    waiter = asyncio.create_task(supervisor.wait_for_room(5))
    release.set()
    await asyncio.wait_for(waiter, 2)
    await asyncio.sleep(0.05)
    assert supervisor.room() == 2


async def test_messages_are_not_lost_when_assistant_turns_are_merged() -> None:
    history = _history(("inbound", "q"), ("outbound", "a1"), ("outbound", "a2"))
    draft = await compose(_subject(history), [], default_builders())
    assistant = [m for m in draft.messages if isinstance(m, AssistantMessage)]
    assert len(assistant) == 1 and assistant[0].text == "a1\na2"
