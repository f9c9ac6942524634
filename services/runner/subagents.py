"""Sub-agents [003 orchestrator star, issue 6 item 9]: other agents of the org offered to a run as tools.

A version's ``subagent_ids`` grant agents of the same org. Each appears to the model as a tool
``agent_<slug>`` with one argument, ``task``. Calling it runs that agent's *published* version as a
nested :class:`~services.runner.loop.AgentLoop` inside the same run — no new dispatch, no run row,
no customer reply — and its final text is the tool's result (anything else is an error result).

Bounds and accounting:

- **depth**: the run's own agent is depth 0; a sub-agent at depth ``MAX_DEPTH`` (2) is offered no
  sub-agents; an agent already in the call chain (its caller, the caller's caller, itself) is never
  offered, so a sub-agent cannot call back;
- **budgets**: the sub-agent's own ``max_steps``; its token and cost budgets are the smaller of its
  version's and what the caller has *left*, so a delegation never lets the run exceed its budget;
- **totals**: its usage and cost (at its own model's price) are absorbed into the caller's loop
  (``AgentLoop.absorb``), hence into the run row and ``run_completed``; its trace entries join the
  run's trace marked ``subagent_id`` / ``subagent_depth``;
- **tools**: only its *read* tools (no write tool, no handoff): writes stay with the run's own
  agent, where autonomy gates them and ``actions_executed`` records them;
- **PII**: the nested loop shares the run's ``Pseudonymizer`` (its requests are sealed, its tool
  calls resolved, its results aliased), and its answer stays aliased for the caller.
"""

from __future__ import annotations

import re
import unicodedata
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy.orm import Session

from services.runner.budget import ModelPrice, RunLimits
from services.runner.context import (
    DraftBuilder,
    IdentityLayer,
    PersonaLayer,
    SkillsLayer,
    SystemPromptLayer,
    ToolCatalogLayer,
    compose,
)
from services.runner.credentials import CredentialResolver, NoCredential
from services.runner.interceptors import FINISH_SPEC, FINISH_TOOL, CallContext, ToolInterceptor
from services.runner.loop import AgentLoop, EventSink, LoopConfig
from services.runner.outcome import OutcomeKind
from services.runner.pii import PiiInterceptor, PiiToolBox, Pseudonymizer
from services.runner.providers import ProviderRegistry, UnknownProvider
from services.runner.providers.base import (
    ModelProvider,
    ProviderAccess,
    TokenUsage,
    ToolCallRequest,
    ToolOutcome,
    ToolSpec,
    UserMessage,
)
from services.runner.store import RunStore
from services.runner.subject import RunSubject, VersionConfig
from services.runner.tools import ToolBox, ToolServerUnavailable
from switchboard.contracts.enums import ErrorFamily
from switchboard.egress import EgressPolicy, refused_url
from switchboard.tool_catalog import TOOL_KINDS, ToolKind

MAX_DEPTH = 2
TOOL_PREFIX = "agent_"
_SLUG_CHARS = 40
TASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"task": {"type": "string", "minLength": 1, "description": "what the agent should do or answer"}},
    "required": ["task"],
    "additionalProperties": False,
}


@dataclass(frozen=True, slots=True)
class SubAgent:
    """A granted agent's published version, with its provider access resolved (or why not)."""

    agent_id: uuid.UUID
    name: str
    tool_name: str
    version: VersionConfig
    access: ProviderAccess | None
    unavailable: str | None = None  # why it cannot run (no credential, unknown provider)

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.tool_name,
            description=f"Delegate a task to the agent {self.name!r}; its answer is the result.",
            input_schema=TASK_SCHEMA,
        )


def _slug(name: str) -> str:
    folded = unicodedata.normalize("NFKD", name.lower())
    ascii_only = "".join(c for c in folded if not unicodedata.combining(c) and c.isascii())
    return re.sub(r"[^a-z0-9]+", "_", ascii_only).strip("_")[:_SLUG_CHARS].strip("_")


def tool_names(agents: Sequence[tuple[uuid.UUID, str]]) -> dict[uuid.UUID, str]:
    """``agent_<slug of the name>``, or ``agent_<short id>`` when the name gives no slug or two agents'
    slugs collide (then every colliding one gets its id appended). Valid for every provider."""
    slugs = {agent_id: _slug(name) for agent_id, name in agents}
    counts: dict[str, int] = {}
    for slug in slugs.values():
        counts[slug] = counts.get(slug, 0) + 1
    names: dict[uuid.UUID, str] = {}
    for agent_id, slug in slugs.items():
        short = agent_id.hex[:8]
        if not slug:
            names[agent_id] = f"{TOOL_PREFIX}{short}"
        elif counts[slug] > 1:
            names[agent_id] = f"{TOOL_PREFIX}{slug}_{short}"
        else:
            names[agent_id] = f"{TOOL_PREFIX}{slug}"
    return names


def read_tools(granted: Sequence[str]) -> tuple[str, ...]:
    """The tools a sub-agent is offered: its granted *read* tools only (see the module docstring)."""
    return tuple(name for name in granted if TOOL_KINDS.get(name) is ToolKind.READ)


Loader = Callable[[uuid.UUID, Sequence[uuid.UUID]], Awaitable[list[SubAgent]]]


@dataclass(frozen=True)
class NestedRuntime:
    """What a nested run borrows from the run it belongs to (built by ``services.runner.execution``)."""

    subject: RunSubject
    load: Loader  # the org's published sub-agents by id, credentials resolved
    providers: Callable[[str], ModelProvider]
    price: Callable[[str, str], Awaitable[ModelPrice]]
    toolbox: Callable[[RunSubject, tuple[str, ...]], ToolBox]
    interceptors: Callable[[], Sequence[ToolInterceptor]]
    pii: Pseudonymizer
    events: EventSink
    max_depth: int = MAX_DEPTH

    async def tools_for(
        self, version: VersionConfig, *, depth: int, chain: frozenset[uuid.UUID]
    ) -> SubAgentTools | None:
        """The sub-agent tools a loop at ``depth`` gets for ``version`` (None: none to offer)."""
        if depth >= self.max_depth:
            return None
        wanted = [a for a in dict.fromkeys(version.subagent_ids) if a not in chain]
        agents = await self.load(self.subject.request.org_id, wanted) if wanted else []
        if not agents:
            return None
        return SubAgentTools(self, agents, depth=depth, chain=chain)


class _NestedTrace:
    """Collects the nested loop's entries, marked with the sub-agent; keeps the run's watchdog alive."""

    def __init__(self, agent_id: uuid.UUID, depth: int, parent: AgentLoop) -> None:
        self._mark = {"subagent_id": str(agent_id), "subagent_depth": depth}
        self._parent = parent
        self.entries: list[dict[str, Any]] = []

    async def append(
        self, entries: list[dict[str, Any]], *, steps: int, usage: TokenUsage, cost: int, final: bool = False
    ) -> None:
        self.keep(entries)
        self._parent.touch()
        # ``usage``/``cost``: the nested loop's so far. On the run's row now, not only once it returns:
        # a runner killed meanwhile left the sub-agent's billed steps out of what the run counted.
        await self._parent.record_spend(usage, cost)

    def keep(self, entries: list[dict[str, Any]]) -> None:
        self.entries.extend({**self._mark, **entry} for entry in entries)  # a deeper mark wins


class _NestedEvents:
    """The run's live events for a nested loop: its text is not the run's reply, so only debug lines."""

    def __init__(self, inner: EventSink, tool_name: str) -> None:
        self._inner = inner
        self._name = tool_name

    def text(self, text: str) -> None:
        return None

    def thinking(self, text: str) -> None:
        return None

    def tool_call(self, call: ToolCallRequest) -> None:
        self._inner.debug("subagent_tool_call", f"{self._name}: {call.name}")

    def tool_result(self, outcome: ToolOutcome, duration_ms: int) -> None:
        self._inner.debug("subagent_tool_result", f"{self._name}: {outcome.name} ({duration_ms} ms)")

    def usage(self, usage: TokenUsage, cost_micros: int) -> None:
        self._inner.usage(usage, cost_micros)

    def error(self, code: str, message: str, family: ErrorFamily, retryable: bool) -> None:
        self._inner.debug("subagent_error", f"{self._name}: {code}")

    def debug(self, name: str, detail: str) -> None:
        self._inner.debug(f"subagent_{name}", f"{self._name}: {detail}")


class _CallersInterrupt:
    """Steering messages are for the run's own agent, taken at its turn boundaries; an interrupt of the
    calling run stops the sub-agent at its next step too — it kept calling its model to the end of
    its budget on a conversation a person had just taken over (2026-12-05)."""

    def __init__(self, caller: AgentLoop) -> None:
        self._caller = caller

    def drain(self) -> list[str]:
        return []

    @property
    def interrupted(self) -> bool:
        return self._caller.interrupted


class _DelegationLayer:
    name = "delegation"

    async def build(self, subject: RunSubject, draft: DraftBuilder) -> None:
        draft.layer(
            "Run contract",
            "Mode: delegated task. Another agent of your organization gave you the task below. Do it with "
            "your tools and answer with the result for that agent; you are not talking to the customer.",
        )


_BUILDERS = (
    IdentityLayer(),
    ToolCatalogLayer(),
    SystemPromptLayer(),
    PersonaLayer(),
    SkillsLayer(),
    _DelegationLayer(),
)


def shared_limits(own: VersionConfig, caller: AgentLoop) -> RunLimits:
    """The sub-agent's own step budget; tokens and cost: its version's or what the caller has left."""
    limits = caller.config.limits
    return replace(
        limits,
        max_steps=own.max_steps,
        token_budget=max(0, min(own.token_budget, limits.token_budget - caller.usage.total)),
        cost_budget_micros=max(0, min(own.cost_budget_micros, limits.cost_budget_micros - caller.cost_micros)),
    )


class SubAgentTools:
    """The interceptor answering ``agent_*`` calls with a nested run of that agent."""

    def __init__(
        self, runtime: NestedRuntime, agents: Sequence[SubAgent], *, depth: int, chain: frozenset[uuid.UUID]
    ) -> None:
        self._runtime = runtime
        self._agents: Mapping[str, SubAgent] = {a.tool_name: a for a in agents}
        self._depth = depth
        self._chain = chain
        self._caller: AgentLoop | None = None

    @property
    def specs(self) -> list[ToolSpec]:
        return [a.spec for a in self._agents.values()]

    def bind(self, caller: AgentLoop) -> None:
        """The loop these tools belong to (created after its tools were offered)."""
        self._caller = caller

    async def before_call(self, ctx: CallContext, call: ToolCallRequest) -> ToolOutcome | None:
        agent = self._agents.get(call.name)
        if agent is None or call.error is not None:
            return None
        if self._caller is None:
            raise RuntimeError("SubAgentTools used before bind()")
        task = str(call.arguments.get("task", "")).strip()
        if not task:
            return ToolOutcome(call.id, call.name, "`task` is required: say what the agent should do.", True)
        if agent.unavailable is not None or agent.access is None:
            return ToolOutcome(call.id, call.name, f"The agent {agent.name!r} cannot run: {agent.unavailable}.", True)
        text, is_error = await self._delegate(agent, agent.access, task, self._caller)
        return ToolOutcome(call.id, call.name, text, is_error)

    async def after_call(self, ctx: CallContext, call: ToolCallRequest, outcome: ToolOutcome) -> ToolOutcome:
        return outcome

    async def _delegate(
        self, agent: SubAgent, access: ProviderAccess, task: str, caller: AgentLoop
    ) -> tuple[str, bool]:
        rt = self._runtime
        depth = self._depth + 1
        version = agent.version
        request = rt.subject.request.model_copy(update={"agent_id": agent.agent_id, "version_id": version.id})
        subject = replace(rt.subject, request=request, agent_name=agent.name, version=version, recent_messages=())
        toolbox = PiiToolBox(rt.toolbox(subject, read_tools(version.granted_tools())), rt.pii)
        trace = _NestedTrace(agent.agent_id, depth, caller)
        try:
            nested = await rt.tools_for(version, depth=depth, chain=self._chain | {agent.agent_id})
            try:
                specs = list(await toolbox.specs())
            except ToolServerUnavailable:
                return f"The agent {agent.name!r} could not reach its tools.", True
            specs += nested.specs if nested is not None else []
            if FINISH_TOOL in version.tool_ids:
                specs.append(FINISH_SPEC)
            draft = await compose(subject, specs, _BUILDERS)
            draft = replace(draft, messages=(UserMessage(task),))
            parent = caller.config
            loop = AgentLoop(
                config=LoopConfig(
                    model=version.model,
                    limits=shared_limits(version, caller),
                    price=await rt.price(version.provider, version.model),
                    call_timeout_s=parent.call_timeout_s,
                    tool_timeout_s=parent.tool_timeout_s,
                    silence_timeout_s=parent.silence_timeout_s,
                    retry=parent.retry,
                ),
                provider=rt.providers(version.provider),
                access=access,
                tools=toolbox,
                events=_NestedEvents(rt.events, agent.spec.name),
                trace=trace,
                steering=_CallersInterrupt(caller),
                interceptors=[*rt.interceptors(), *([nested] if nested else []), PiiInterceptor(rt.pii)],
                pii=rt.pii,
            )
            if nested is not None:
                nested.bind(loop)
            try:
                outcome = await loop.run(draft)
            except BaseException:
                # Stopped from outside (the calling run handed back at a shutdown, or it crashed):
                # what this loop spent so far is still the calling run's, billed by the provider.
                unsaved, so_far = loop.abandon("the calling run stopped")
                trace.keep(unsaved)
                caller.absorb(trace.entries, so_far.usage, so_far.cost_micros)
                raise
        finally:
            await toolbox.aclose()
        caller.absorb(trace.entries, outcome.usage, outcome.cost_micros)
        if outcome.kind in (OutcomeKind.ANSWERED, OutcomeKind.FINISHED) and outcome.final_text:
            return outcome.final_text, False
        why = outcome.abort_reason or (outcome.failure.code if outcome.failure else None) or outcome.kind.value
        return f"The agent {agent.name!r} did not complete the task ({why}).", True


async def _egress_checked(egress: EgressPolicy, resolved: ProviderAccess | str) -> ProviderAccess | str:
    if not isinstance(resolved, ProviderAccess) or not resolved.base_url:
        return resolved
    refused = await refused_url(egress, resolved.base_url)
    return resolved if refused is None else refused.code


async def load_subagents(
    store: RunStore,
    providers: ProviderRegistry,
    credentials: CredentialResolver,
    org_id: uuid.UUID,
    agent_ids: Sequence[uuid.UUID],
    egress: EgressPolicy | None = None,
) -> list[SubAgent]:
    """The org's granted agents that are published now, each with its credential resolved in the
    fixed order [002] (a sub-agent without a key or adapter is offered, and answers with an error;
    so does one whose credential's base_url leads where ``egress`` refuses)."""

    def resolve(session: Session, config: VersionConfig) -> ProviderAccess | str:
        try:
            requires_key = providers.get(config.provider).requires_key
            return credentials.resolve(
                session,
                org_id=org_id,
                provider=config.provider,
                version_credential_id=config.credential_id,
                requires_key=requires_key,
            )
        except UnknownProvider:
            return f"no adapter for provider {config.provider!r}"
        except NoCredential as exc:
            return exc.code

    rows = await store.subagents(org_id, agent_ids, resolve)
    if egress is not None:
        rows = [(a, n, c, await _egress_checked(egress, r)) for a, n, c, r in rows]
    names = tool_names([(agent_id, name) for agent_id, name, _, _ in rows])
    return [
        SubAgent(
            agent_id=agent_id,
            name=name,
            tool_name=names[agent_id],
            version=config,
            access=resolved if isinstance(resolved, ProviderAccess) else None,
            unavailable=None if isinstance(resolved, ProviderAccess) else resolved,
        )
        for agent_id, name, config, resolved in rows
    ]
