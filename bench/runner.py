"""``make bench-runner``: the runner's overhead per step against LangGraph and the OpenAI Agents SDK,
and a thousand concurrent runs of the real service against a slow fake model.

(a) **Overhead per step** — the same scripted conversation (the model asks for a tool
``--steps`` times, then answers) on the same instant fake model, in one process:

- *switchboard*: ``services.runner.loop.AgentLoop`` with the production interceptors
  (doom loop, argument validation against the tool's JSON schema, handoff, finish),
  budget checks, trace entries and live-event records built exactly as in production;
  only the I/O is left out (the trace sink keeps entries in memory, events are queued
  but not sent), as it is for the other two, which persist nothing;
- *langgraph*: ``langgraph.prebuilt.create_react_agent`` with a scripted ``BaseChatModel``;
- *openai-agents*: ``agents.Runner.run`` with a scripted ``agents.Model`` (tracing off).

Overhead = wall time of the run - time inside the fake model - time inside the tool,
divided by the number of model steps; p50 / p99 over ``--runs`` runs after a warm-up.

(b) **Concurrency** — ``python -m services.runner`` as a subprocess against the local
stack (Kafka, PostgreSQL), with the fake model served over HTTP by this process
(Anthropic API, ``--latency`` seconds per call). ``--concurrent`` runs are sent to
``run_requested`` at once; reported: completed runs per second (first send → last
terminal row) and the runner's peak RSS (``VmHWM``).

Needs the ``bench`` extra (``pip install -e '.[bench]'``) and, for (b), ``make up``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.report import Goal, Measurement, add_common_arguments, publish

STEPS = 5


class Clock:
    model = 0.0
    tool = 0.0

    @classmethod
    def reset(cls) -> None:
        cls.model = cls.tool = 0.0


def percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def measure(run_once: Callable[[], Awaitable[None]], runs: int, steps: int) -> tuple[float, float]:
    for _ in range(max(5, runs // 10)):
        await run_once()
    samples = []
    for _ in range(runs):
        Clock.reset()
        started = time.perf_counter()
        await run_once()
        total = time.perf_counter() - started
        samples.append((total - Clock.model - Clock.tool) / (steps + 1) * 1e6)
    return percentiles(samples)


# ----------------------------------------------------------------------------- switchboard


def switchboard_runner(steps: int) -> Callable[[], Awaitable[None]]:
    from services.runner.budget import ModelPrice, RunLimits
    from services.runner.context import PromptDraft
    from services.runner.events import RunEventPublisher, RunEvents
    from services.runner.interceptors import default_interceptors
    from services.runner.loop import AgentLoop, LoopConfig
    from services.runner.providers.base import (
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
    from services.runner.steering import RunSteering
    from switchboard.contracts import RunRequested, WakeContext
    from switchboard.contracts.enums import WakeReason

    spec = ToolSpec(
        "lookup", "Look something up.", {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    )

    class Scripted(ModelProvider):
        name = "bench"

        async def complete(self, request: ModelRequest, access: ProviderAccess, *, timeout_s: float) -> ModelResponse:
            started = time.perf_counter()
            done = sum(len(m.results) for m in request.messages if isinstance(m, ToolResults))
            if done < steps:
                call = ToolCallRequest.parse(f"c{done}", "lookup", {"q": f"q{done}"})
                response = ModelResponse("", (call,), TokenUsage(100, 10), StopReason.TOOL_USE)
            else:
                response = ModelResponse("done", (), TokenUsage(100, 10), StopReason.END_TURN)
            Clock.model += time.perf_counter() - started
            return response

    class Tools:
        async def specs(self) -> tuple[ToolSpec, ...]:
            return (spec,)

        async def call(self, call: ToolCallRequest, *, timeout_s: float) -> ToolOutcome:
            started = time.perf_counter()
            outcome = ToolOutcome(call.id, call.name, f"result for {call.arguments['q']}")
            Clock.tool += time.perf_counter() - started
            return outcome

        async def aclose(self) -> None:
            return None

    class Trace:
        async def append(
            self, entries: list[dict[str, Any]], *, steps: int, usage: TokenUsage, cost: int, final: bool = False
        ) -> None:
            self.entries = entries

    publisher = RunEventPublisher(None, maxsize=1_000_000)
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
    )
    draft = PromptDraft((SystemLayer("Instructions", "be brief"),), (UserMessage("hi"),), (spec,))
    config = LoopConfig(
        model="bench",
        limits=RunLimits(25, 500_000, 100_000_000, 1024, 64),
        price=ModelPrice(3_000_000, 15_000_000),
        call_timeout_s=60,
        tool_timeout_s=60,
        silence_timeout_s=900,
    )

    async def run_once() -> None:
        loop = AgentLoop(
            config=config,
            provider=Scripted(),
            access=ProviderAccess(CredentialSource.NONE, None),
            tools=Tools(),
            events=RunEvents(publisher, request, model="bench"),
            trace=Trace(),
            steering=RunSteering(),
            interceptors=default_interceptors(),
        )
        outcome = await loop.run(draft)
        assert outcome.final_text == "done", outcome
        while not publisher._queue.empty():  # events are built and queued as in production, not sent
            publisher._queue.get_nowait()

    return run_once


# ----------------------------------------------------------------------------- langgraph


def langgraph_runner(steps: int) -> Callable[[], Awaitable[None]]:
    import warnings

    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

    class ScriptedChat(BaseChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
            raise NotImplementedError

        async def _agenerate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            started = time.perf_counter()
            done = sum(1 for m in messages if m.type == "tool")
            message = (
                AIMessage(content="", tool_calls=[{"name": "lookup", "args": {"q": f"q{done}"}, "id": f"c{done}"}])
                if done < steps
                else AIMessage(content="done")
            )
            result = ChatResult(generations=[ChatGeneration(message=message)])
            Clock.model += time.perf_counter() - started
            return result

    @tool
    async def lookup(q: str) -> str:
        """Look something up."""
        started = time.perf_counter()
        result = f"result for {q}"
        Clock.tool += time.perf_counter() - started
        return result

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = create_react_agent(ScriptedChat(), [lookup], prompt="be brief")

    async def run_once() -> None:
        out = await graph.ainvoke({"messages": [("user", "hi")]})
        assert out["messages"][-1].content == "done"

    return run_once


# ----------------------------------------------------------------------------- openai agents


def openai_agents_runner(steps: int) -> Callable[[], Awaitable[None]]:
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    set_tracing_disabled(True)

    class ScriptedModel(Model):
        async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
            started = time.perf_counter()
            items = input if isinstance(input, list) else []
            done = sum(1 for i in items if isinstance(i, dict) and i.get("type") == "function_call_output")
            output: list[Any]
            if done < steps:
                output = [
                    ResponseFunctionToolCall(
                        type="function_call",
                        call_id=f"c{done}",
                        name="lookup",
                        arguments=json.dumps({"q": f"q{done}"}),
                        id=f"fc{done}",
                        status="completed",
                    )
                ]
            else:
                text = ResponseOutputText(type="output_text", text="done", annotations=[])
                output = [
                    ResponseOutputMessage(id="m", type="message", role="assistant", status="completed", content=[text])
                ]
            response = ModelResponse(output=output, usage=Usage(), response_id=None)
            Clock.model += time.perf_counter() - started
            return response

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    @function_tool
    async def lookup(q: str) -> str:
        """Look something up."""
        started = time.perf_counter()
        result = f"result for {q}"
        Clock.tool += time.perf_counter() - started
        return result

    agent = Agent(name="bench", instructions="be brief", tools=[lookup], model=ScriptedModel())

    async def run_once() -> None:
        result = await Runner.run(agent, "hi", max_turns=steps + 5)
        assert result.final_output == "done"

    return run_once


async def overhead(runs: int, steps: int) -> dict[str, tuple[float, float]]:
    """(p50, p99) overhead per step in µs, per framework."""
    results: dict[str, tuple[float, float]] = {}
    for name, factory in (
        ("switchboard", switchboard_runner),
        ("langgraph", langgraph_runner),
        ("openai-agents", openai_agents_runner),
    ):
        results[name] = await measure(factory(steps), runs, steps)
        p50, p99 = results[name]
        print(f"  {name:14s} overhead per step  p50 {p50:8.0f} µs   p99 {p99:8.0f} µs", flush=True)
    ratio = results["switchboard"][0] / results["langgraph"][0]
    print(f"  switchboard / langgraph (p50): {ratio:.2f} (goal <= 0.5)")
    return results


# ----------------------------------------------------------------------------- concurrency


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


@dataclass(frozen=True)
class ConcurrencyResult:
    requested: int
    completed: int
    elapsed_s: float
    peak_rss_mb: float


async def concurrency(concurrent: int, latency_s: float) -> ConcurrencyResult:
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from switchboard.db.models import AiAgentRun
    from switchboard.db.session import tenant_transaction
    from switchboard.kafka import admin
    from switchboard.kafka.producer import RecordProducer
    from switchboard.settings import KafkaSettings
    from tests.integration.runner.harness import create_agent, run_request
    from tests.support.fake_llm import FakeLLM, Reply
    from tests.support.ports import free_port
    from tests.support.stack import acquire_stack

    stack, _ = acquire_stack()
    kafka = KafkaSettings(bootstrap_servers=stack.kafka_bootstrap_servers, topic_prefix=f"bench{uuid.uuid4().hex[:8]}.")
    await admin.ensure_topics(kafka)
    fake = await FakeLLM(lambda _: Reply(text="ok", delay_s=latency_s)).start()
    from switchboard.db.session import create_engine

    engine = create_engine(stack.database_url, pool_size=2)
    agent = create_agent(engine, provider="anthropic", model="claude-haiku-4-5")
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": stack.kafka_bootstrap_servers,
        "KAFKA_TOPIC_PREFIX": kafka.topic_prefix,
        "DATABASE_URL": stack.database_url,
        "PROVIDERS_ANTHROPIC_BASE_URL": fake.url,
        "RUNNER_HEALTH_PORT": str(free_port()),
        "RUNNER_MAX_IN_FLIGHT": str(concurrent + 100),
        "RUNNER_DB_POOL_SIZE": "40",
        "RUNNER_GROUP_ID": f"bench-{uuid.uuid4().hex[:8]}",
        "SWITCHBOARD_LOG_LEVEL": "WARNING",
    }
    log_path = Path(tempfile.gettempdir()) / f"bench-runner-{os.getpid()}.log"
    log_file = log_path.open("w")
    proc = subprocess.Popen([sys.executable, "-m", "services.runner"], env=env, stderr=log_file)
    try:
        await asyncio.sleep(6)  # join the group
        requests = [run_request(_conversation(engine, agent), []) for _ in range(concurrent)]
        async with RecordProducer(kafka, service="bench") as producer:
            started = finished_at = time.monotonic()
            await asyncio.gather(*(producer.send(_topic(), r) for r in requests))
        ids = {r.run_id for r in requests}
        done: set[uuid.UUID] = set()
        progress_at, last_count = time.monotonic(), 0
        while len(done) < len(ids) and time.monotonic() - progress_at < 30:
            await asyncio.sleep(0.5)
            with Session(engine) as session, tenant_transaction(session, agent.org_id):
                done = set(
                    session.scalars(
                        select(AiAgentRun.id).where(
                            AiAgentRun.id.in_(ids), AiAgentRun.status.in_(["completed", "failed", "aborted"])
                        )
                    )
                )
            if len(done) > last_count:
                progress_at, last_count = time.monotonic(), len(done)
                finished_at = progress_at
        elapsed = finished_at - started
        rss = peak_rss_mb(proc.pid)
        print(f"  {len(done)}/{concurrent} runs done in {elapsed:.1f} s: {len(done) / elapsed:.1f} runs/s")
        print(f"  runner peak RSS {rss:.0f} MB (goal <= 512 MB)")
        result = ConcurrencyResult(concurrent, len(done), elapsed, rss)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        log_file.close()
        problems = [line for line in log_path.read_text().splitlines() if '"level": "error"' in line]
        print(f"  runner log: {log_path} ({len(problems)} error lines)")
        await fake.stop()
        await admin.delete_topics(kafka)
        engine.dispose()
    return result


def _topic() -> Any:
    from switchboard.contracts import Topics

    return Topics.RUN_REQUESTED


def _conversation(engine: Any, agent: Any) -> Any:
    import dataclasses

    from sqlalchemy.orm import Session

    from switchboard.db.models import Contact, Conversation
    from switchboard.db.session import tenant_transaction

    with Session(engine) as session, tenant_transaction(session, agent.org_id):
        contact = Contact(org_id=agent.org_id, external_id=f"{uuid.uuid4().hex[:12]}@c.us")
        session.add(contact)
        session.flush()
        conversation = Conversation(
            org_id=agent.org_id,
            channel_session_id=agent.channel_session_id,
            contact_id=contact.id,
            chat_id=contact.external_id,
        )
        session.add(conversation)
        session.flush()
        return dataclasses.replace(agent, conversation_id=conversation.id, contact_id=contact.id)


SMOKE = {"runs": 20, "concurrent": 20, "latency": 0.1}
LANGGRAPH = "LangGraph create_react_agent"
RSS_GOAL_MB = 512.0


def measurements(frameworks: dict[str, tuple[float, float]], concurrent: ConcurrencyResult | None) -> list[Measurement]:
    """(a) against LangGraph (and the OpenAI Agents SDK), (b) against its fixed goals; names in docs/benchmarks.md."""
    ours, langgraph, openai_agents = frameworks["switchboard"], frameworks["langgraph"], frameworks["openai-agents"]
    found = [
        Measurement.of(
            "runner.overhead_per_step.p50",
            ours[0],
            "µs",
            baseline=LANGGRAPH,
            baseline_value=langgraph[0],
            goal=Goal("ratio", "<=", 0.5),
        ),
        Measurement.of("runner.overhead_per_step.p99", ours[1], "µs", baseline=LANGGRAPH, baseline_value=langgraph[1]),
        Measurement.of(
            "runner.overhead_per_step.p50_vs_openai_agents",
            ours[0],
            "µs",
            baseline="OpenAI Agents SDK Runner.run",
            baseline_value=openai_agents[0],
        ),
    ]
    if concurrent is not None:
        found += [
            Measurement.of(
                "runner.concurrency.completed",
                concurrent.completed,
                "runs",
                baseline="runs requested at once",
                baseline_value=concurrent.requested,
                goal=Goal("ratio", ">=", 1.0),
            ),
            Measurement.of(
                "runner.concurrency.peak_rss",
                concurrent.peak_rss_mb,
                "MB",
                goal=Goal("value", "<=", RSS_GOAL_MB),
            ),
            Measurement.of(
                "runner.concurrency.throughput",
                concurrent.completed / concurrent.elapsed_s if concurrent.elapsed_s > 0 else None,
                "runs/s",
            ),
        ]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300, help="runs per framework for (a)")
    parser.add_argument("--steps", type=int, default=STEPS, help="tool steps per run for (a)")
    parser.add_argument("--concurrent", type=int, default=1000, help="concurrent runs for (b); 0 skips it")
    parser.add_argument("--latency", type=float, default=1.0, help="fake model latency in seconds for (b)")
    add_common_arguments(parser, argv, SMOKE)
    args = parser.parse_args(argv)
    print(f"(a) overhead per step: {args.runs} runs x {args.steps} tool steps + 1 answer")
    frameworks = asyncio.run(overhead(args.runs, args.steps))
    concurrent = None
    if args.concurrent:
        print(f"(b) {args.concurrent} concurrent runs, fake model latency {args.latency:.1f} s")
        concurrent = asyncio.run(concurrency(args.concurrent, args.latency))
    publish(measurements(frameworks, concurrent), args.report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
