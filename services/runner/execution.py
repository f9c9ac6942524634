"""One run from ``run_requested`` to its terminal record: claim, handoff check, loop, finish.

1. **claim** — one transaction (``RunStore.claim``): the subject and the context
   preloads, the row inserted ``running`` with ``run_started`` in the outbox and the
   credential resolved; a redelivered run id is skipped; a conversation still held by
   another live run is waited for;
2. **keyword handoff** — the version's keywords on the inbound text, before any
   model call [004 D4] (decided inside the claim: a handed-off run resolves no key);
3. (the former separate ``pending → running`` transaction is part of the claim);
4. **resolve** — provider adapter, catalog price, the key (decrypted now, held
   by this run only), the tools granted, the prompt (context builders);
5. **loop** — ``AgentLoop`` (trace appended as it goes, live events);
6. **finish** — the terminal transaction (row, usage counters, credential
   state, ``run_completed`` / ``handoff_triggered`` in the outbox), then the
   ``done`` event.

A run cancelled by the supervisor at shutdown is *handed back*: its row is
closed as lost without ``run_completed``, so the dispatcher's lease recovers it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session

from services.runner.autonomy import RunAutonomy
from services.runner.autonomy_store import AutonomyStore
from services.runner.budget import ModelPrice, RunLimits
from services.runner.classification import LabelResult, classify_inbound, with_labels_layer
from services.runner.commands import malformed_command_reply
from services.runner.context import ContextBuilder, compose, default_builders, prompt_record
from services.runner.credentials import CredentialResolver, NoCredential
from services.runner.events import RunEventPublisher, RunEvents
from services.runner.handoff import keyword_handoff, match_handoff_keyword
from services.runner.interceptors import FINISH_SPEC, FINISH_TOOL, ToolInterceptor, default_interceptors
from services.runner.label_filter import CLASSIFICATION_MISMATCH, filter_mismatch
from services.runner.loop import AgentLoop, LoopConfig, RetryPolicy
from services.runner.metrics import (
    RUN_COST,
    RUN_LATENCY,
    RUN_TOKENS,
    RUNS_FAILED,
    RUNS_HANDOFF,
    RUNS_TOTAL,
    TOOL_CALLS,
)
from services.runner.outcome import (
    ALREADY_ANSWERED,
    CONTACT_ERASED,
    HANDOFF_UNAVAILABLE,
    RUNNER_SHUTDOWN,
    SUPERSEDED,
    WITH_HUMANS,
    HandoffRequest,
    LoopOutcome,
    OutcomeKind,
    RunFailure,
    classify,
)
from services.runner.pii import PiiInterceptor, PiiToolBox, Pseudonymizer
from services.runner.providers import ProviderRegistry, UnknownProvider
from services.runner.providers.base import (
    CredentialSource,
    ModelProvider,
    ProviderAccess,
    ProviderError,
    ProviderErrorKind,
    TokenUsage,
)
from services.runner.settings import RunnerSettings
from services.runner.state import StateStore, run_state
from services.runner.steering import RunSteering
from services.runner.store import ClaimState, Finish, RunStore, StartPlan
from services.runner.subagents import NestedRuntime, SubAgentTools, load_subagents
from services.runner.subject import RunSubject, VersionConfig
from services.runner.tools import McpToolBox, NoTools, ToolBox, ToolCatalog, ToolServerUnavailable
from services.runner.turns import Turn, TurnPlanner
from switchboard.contracts import Action, RunRequested, SendTarget
from switchboard.contracts.enums import ErrorFamily, HandoffTrigger, RunStatus, Urgency
from switchboard.egress import EgressPolicy, refused_url
from switchboard.internal_chats import is_internal_chat
from switchboard.observability.logging import get_logger
from switchboard.run_tokens import RunTokenClaims, mint_run_token
from switchboard.slash_commands import is_compact_request
from switchboard.tool_catalog import gated_area

log = get_logger(__name__)
T = TypeVar("T")


@dataclass
class RunHandle:
    """A run held by this process, from acceptance to its terminal record."""

    request: RunRequested
    steering: RunSteering = field(default_factory=RunSteering)
    task: asyncio.Task[None] | None = None
    status: str = "accepted"
    handing_back: bool = False
    # A newer attempt of this run arrived here: stop and close it quietly (the newer one answers).
    superseded: bool = False
    loop: AgentLoop | None = None
    autonomy: RunAutonomy | None = None  # issue 6: autonomy gate state (docs/autonomy.md)
    answered_by: uuid.UUID | None = None  # a recovery attempt whose messages were answered already
    with_humans: bool = False  # people had taken the conversation over when it was claimed
    contact_erased: bool = False  # the conversation's contact was erased before the claim
    accepted_at: float = field(default_factory=time.monotonic)
    trace: _Trace | None = None  # the run's trace sink, once its loop is built


ToolBoxFactory = Callable[[RunSubject, tuple[str, ...]], ToolBox]


@dataclass
class RunnerDeps:
    settings: RunnerSettings
    store: RunStore
    providers: ProviderRegistry
    credentials: CredentialResolver
    publisher: RunEventPublisher
    tool_catalog: ToolCatalog
    token_secret: bytes
    toolbox_factory: ToolBoxFactory | None = None
    builders: Callable[[RunStore], Sequence[ContextBuilder]] = field(default=lambda store: default_builders())
    interceptors: Callable[[dict[str, str]], Sequence[ToolInterceptor]] = field(default=default_interceptors)
    state: StateStore | None = None  # issue 6, docs/memory.md "State": the local state_note tool
    autonomy: AutonomyStore | None = None  # None: no autonomy gate (unit tests)
    # Issue 6 (docs/memory.md): background work started once a run is recorded (thread summary,
    # follow-up link); each hook returns at once and never delays or fails the run.
    after_run: Sequence[Callable[[RunSubject, ProviderAccess | None], None]] = ()
    # Issue 6 item 4 (docs/agent-context.md "Slash commands"): plan / goal / loop / skill turns, and the
    # summarize-only run of /compact. None: every run is a plain reply turn.
    turns: TurnPlanner | None = None
    compact: Callable[[RunSubject, ProviderAccess | None], Awaitable[LoopOutcome]] | None = None
    # Where a credential's base_url may lead (switchboard.egress); the default refuses only the never-allowed.
    egress: EgressPolicy = field(default_factory=EgressPolicy)


def _labels(request: RunRequested) -> dict[str, str]:
    return {
        "run_id": str(request.run_id),
        "agent_id": str(request.agent_id),
        "version_id": str(request.version_id),
        "organization_id": str(request.org_id),
    }


class RunExecutor:
    def __init__(self, deps: RunnerDeps) -> None:
        self._deps = deps
        self._settings = deps.settings

    # ------------------------------------------------------------------ entry

    async def execute(self, handle: RunHandle) -> None:
        request = handle.request
        labels = _labels(request)
        try:
            claimed = await self._claim(handle)
        except Exception as exc:
            # Nothing was written (one transaction): our heartbeats stop with this task, the lease recovers the run.
            log.error("run could not start", extra={**labels, "error": type(exc).__name__}, exc_info=True)
            return
        if claimed is None:
            return
        subject, started_at, begun = claimed
        clock = time.monotonic()
        version = subject.version
        events = RunEvents(self._deps.publisher, request, model=version.model)
        handle.status = "running"
        silence_s = version.silence_timeout_s(self._settings.silence_timeout_s)
        events.debug(
            "run_started",
            f"runner {self._settings.runner_id}, attempt {request.attempt}, silence timeout {silence_s:.0f}s",
        )
        log.info("run started", extra={**labels, "provider": version.provider, "model": version.model})
        preset, access = begun
        not_run = _not_run(handle)
        if not_run is not None:
            log.info("run not run: nothing to do", extra={**labels, "abort_reason": not_run.abort_reason})
            preset = not_run
        if preset is not None and preset.handoff is not None:
            events.debug("handoff_keyword", f"matched {preset.handoff.matched_keyword!r} before any model call")
        try:
            outcome = preset or await self._loop_outcome(handle, subject, access, events, labels)
        except asyncio.CancelledError:
            if not handle.handing_back:
                raise
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            await self._hand_back(handle, subject, started_at, clock)
            return
        except Exception as exc:  # a bug or the database: record it, never leak its text
            log.error("run crashed", extra={**labels, "error": type(exc).__name__}, exc_info=True)
            outcome = self._crashed(handle, exc)
        await self._finish(
            subject,
            outcome,
            events,
            started_at,
            clock,
            access,
            labels,
            handle.steering,
            autonomy=handle.autonomy,
            trace=handle.trace,
        )
        for hook in self._deps.after_run:
            hook(subject, access)

    def _start_plan(self, subject: RunSubject) -> tuple[StartPlan[ProviderAccess | NoCredential], LoopOutcome | None]:
        """How the run starts, decided on its subject inside the claim transaction, and the outcome
        when it is decided before any model call (keyword handoff, unknown provider): then no key
        is resolved."""
        version = subject.version
        request = subject.request
        plan: StartPlan[ProviderAccess | NoCredential] = StartPlan(version.provider, version.model, datetime.now(UTC))
        match = match_handoff_keyword(subject.inbound_text, version.handoff_keywords)
        if match is not None:
            return plan, LoopOutcome(
                OutcomeKind.HANDOFF,
                handoff=keyword_handoff(match),
                summary=f"Handed off by keyword {match.keyword!r}; no model was called.",
            )
        try:
            requires_key = self._deps.providers.get(version.provider).requires_key
        except UnknownProvider:
            return plan, self._failed("unknown_provider", f"no adapter for provider {version.provider!r}")

        def resolve(session: Session) -> ProviderAccess | NoCredential:
            try:
                return self._deps.credentials.resolve(
                    session,
                    org_id=request.org_id,
                    provider=version.provider,
                    version_credential_id=version.credential_id,
                    requires_key=requires_key,
                )
            except NoCredential as exc:
                return exc

        return replace(plan, resolve=resolve), None

    # ------------------------------------------------------------------ claim

    async def _claim(
        self, handle: RunHandle
    ) -> tuple[RunSubject, datetime, tuple[LoopOutcome | None, ProviderAccess | None]] | None:
        """Claim and start the run; returns its subject, start time, and the preset outcome or the
        provider access. None: nothing to do (a redelivery) or the conversation stayed busy."""
        request = handle.request
        deadline = time.monotonic() + self._settings.claim_wait_s
        delay = 0.2
        decided: list[tuple[StartPlan[ProviderAccess | NoCredential], LoopOutcome | None]] = []

        def plan(subject: RunSubject) -> StartPlan[ProviderAccess | NoCredential]:
            decided.append(self._start_plan(subject))  # the last one is the committed claim's
            return decided[-1][0]

        while True:
            claim = await _with_db_retries(
                lambda: self._deps.store.claim(request, stale_after_s=self._settings.stale_run_after_s, plan=plan)
            )
            if claim.state is ClaimState.CREATED:
                assert claim.subject is not None
                handle.answered_by = claim.answered_by
                handle.with_humans = claim.with_humans
                handle.contact_erased = claim.contact_erased
                start, preset = decided[-1]
                resolved = claim.resolved
                if isinstance(resolved, NoCredential):
                    return claim.subject, start.started_at, (self._failed(resolved.code, str(resolved)), None)
                if preset is None and resolved is not None and resolved.base_url:
                    # Before any model call: a tenant's base_url must not lead to a forbidden address.
                    refused = await refused_url(self._deps.egress, resolved.base_url)
                    if refused is not None:
                        return claim.subject, start.started_at, (self._failed(refused.code, str(refused)), None)
                return claim.subject, start.started_at, (preset, resolved)
            if claim.state is ClaimState.DUPLICATE:
                log.info(
                    "run already recorded, skipped (redelivery)",
                    extra={**_labels(request), "status": claim.existing_status},
                )
                return None
            if time.monotonic() >= deadline:
                log.error(
                    "conversation still busy, run not started; the dispatcher's lease will recover it",
                    extra={**_labels(request), "busy_run_id": str(claim.busy_run_id)},
                )
                return None
            await asyncio.sleep(delay)
            delay = min(2.0, delay * 2)

    # ------------------------------------------------------------------ the run

    async def _loop_outcome(
        self,
        handle: RunHandle,
        subject: RunSubject,
        access: ProviderAccess | None,
        events: RunEvents,
        labels: dict[str, str],
    ) -> LoopOutcome:
        version = subject.version
        request = subject.request
        # Issue 6: a malformed slash command is answered with what is wrong, before any model call.
        command_reply = malformed_command_reply(subject)
        if command_reply is not None:
            return command_reply
        # Issue 6 item 4: /compact only summarizes; a slash turn sets mode, tools, directive and budget.
        if self._deps.compact is not None and is_compact_request(request.request_id):
            return await self._deps.compact(subject, access)
        turn = await self._deps.turns.prepare(subject) if self._deps.turns is not None else Turn(subject)
        if turn.reply is not None:
            return turn.reply
        subject = turn.subject
        provider = self._deps.providers.get(version.provider)
        price = await self._deps.store.price(version.provider, version.model)
        granted = turn.tools(version.granted_tools())
        # Autonomy (issue 6, docs/autonomy.md): areas that are off offer no write tools.
        autonomy = await RunAutonomy.load(self._deps.autonomy, subject, granted) if self._deps.autonomy else None
        handle.autonomy = autonomy
        if autonomy is not None:
            granted = autonomy.offered(granted)
        # PII (issue 6): aliases for the model, real values for the tools and the customer.
        pii = Pseudonymizer(names=[subject.conversation.contact_name if subject.conversation else None])
        toolbox = PiiToolBox(self._toolbox(subject, granted), pii)
        try:
            try:
                specs = list(await toolbox.specs())
            except ToolServerUnavailable:
                return _tool_server_down()
            if FINISH_TOOL in version.tool_ids:
                specs.append(FINISH_SPEC)
            # Issue 6 item 9 (docs/agent-context.md "Sub-agents and classification"): granted agents as tools.
            subagents = await self._subagent_tools(subject, pii, events, labels)
            specs += subagents.specs if subagents is not None else []
            specs.extend(turn.local_tools)  # issue 6 item 4: submit_plan / goal_complete
            state = run_state(self._deps.state, subject, pii, granted)  # issue 6, docs/memory.md "State"
            specs.extend(state.specs)
            draft = await compose(subject, specs, turn.builders(self._deps.builders(self._deps.store)), mode=turn.mode)
            if autonomy is not None:  # a resumed run: the paused call and the owner's decision
                draft = autonomy.resumed(draft)
            # Issue 6 item 9: the optional classification step, before the loop.
            labeled = await self._classify(subject, provider, access, price, pii)
            if labeled is not None and labeled.labels is not None:
                unmet = await self._unmet_label_filter(subject, labeled, events)
                if unmet is not None:
                    return unmet
                draft = with_labels_layer(draft, labeled.labels)
            prompt = prompt_record(pii.layers(draft.system), pii.messages(draft.messages), draft.tools)
            trace = handle.trace = _Trace(self._deps.store, request, handle, prompt=prompt)
            loop = AgentLoop(
                config=LoopConfig(
                    model=version.model,
                    limits=turn.limits(self._limits(version)),
                    price=price,
                    call_timeout_s=self._settings.model_call_timeout_s,
                    tool_timeout_s=self._settings.tool_call_timeout_s,
                    silence_timeout_s=version.silence_timeout_s(self._settings.silence_timeout_s),
                    handoff_keywords=tuple(version.handoff_keywords),
                    retry=RetryPolicy(
                        max_attempts=self._settings.provider_max_attempts,
                        initial_backoff_s=self._settings.provider_backoff_initial_s,
                        max_backoff_s=self._settings.provider_backoff_max_s,
                    ),
                ),
                provider=provider,
                access=access or ProviderAccess(source=CredentialSource.NONE, base_url=None),
                tools=toolbox,
                events=events,
                trace=trace,
                steering=handle.steering,
                interceptors=[
                    *self._deps.interceptors(labels),
                    *turn.interceptors,
                    *state.interceptors,
                    *([subagents] if subagents is not None else []),
                    *([autonomy.gate(pii)] if autonomy is not None else []),
                    PiiInterceptor(pii),
                ],
                pii=pii,
            )
            handle.loop = loop
            turn.watch(lambda: loop.cost_micros)
            if subagents is not None:
                subagents.bind(loop)
            if labeled is not None:  # its tokens and cost are the run's
                loop.absorb(labeled.entries, labeled.usage, labeled.cost_micros)
            return pii.reveal_outcome(await turn.settle(await loop.run(draft)))
        finally:
            await toolbox.aclose()

    # ------------------------------------------------------------------ issue 6 item 9

    async def _subagent_tools(
        self, subject: RunSubject, pii: Pseudonymizer, events: RunEvents, labels: dict[str, str]
    ) -> SubAgentTools | None:
        """The version's granted agents as tools (``services/runner/subagents.py``); None without any."""
        if not subject.version.subagent_ids:
            return None
        deps = self._deps
        runtime = NestedRuntime(
            subject=subject,
            load=lambda org_id, ids: load_subagents(
                deps.store, deps.providers, deps.credentials, org_id, ids, deps.egress
            ),
            providers=deps.providers.get,
            price=deps.store.price,
            toolbox=self._toolbox,
            interceptors=lambda: deps.interceptors(labels),
            pii=pii,
            events=events,
        )
        return await runtime.tools_for(subject.version, depth=0, chain=frozenset({subject.request.agent_id}))

    def _limits(self, version: VersionConfig) -> RunLimits:
        """The version's per-run budgets with the runner's output settings."""
        return RunLimits(
            max_steps=version.max_steps,
            token_budget=version.token_budget,
            cost_budget_micros=version.cost_budget_micros,
            max_output_tokens=self._settings.max_output_tokens,
            min_output_tokens=self._settings.min_output_tokens,
            reasoning_allowance_tokens=self._settings.reasoning_allowance_tokens,
        )

    async def _classify(
        self,
        subject: RunSubject,
        provider: ModelProvider,
        access: ProviderAccess | None,
        price: ModelPrice,
        pii: Pseudonymizer,
    ) -> LabelResult | None:
        """Labels for the inbound message(s) when the version asks, stored on the run row."""
        if not subject.version.classification_enabled or not subject.inbound_text:
            return None
        labeled = await classify_inbound(
            subject.inbound_text,
            provider=provider,
            access=access or ProviderAccess(source=CredentialSource.NONE, base_url=None),
            model=subject.version.model,
            price=price,
            pii=pii,
            timeout_s=self._settings.model_call_timeout_s,
            reasoning_allowance_tokens=self._settings.reasoning_allowance_tokens,
            budget=self._limits(subject.version),
        )
        if labeled.labels is not None:
            await _with_db_retries(
                lambda: self._deps.store.save_classification(subject.request, labeled.labels.as_json())  # type: ignore[union-attr]
            )
        return labeled

    async def _unmet_label_filter(
        self, subject: RunSubject, labeled: LabelResult, events: RunEvents
    ) -> LoopOutcome | None:
        """Issue 6 item 9: the version's classification filter (``label_filter.py``). Unmet: the run ends
        without its loop, the classification's trace and tokens kept; ``finish`` re-dispatches the messages."""
        assert labeled.labels is not None
        unmet = filter_mismatch(await self._deps.store.label_filter(subject.request), labeled.labels)
        if unmet is None:
            return None
        events.debug(CLASSIFICATION_MISMATCH, f"label {unmet} outside this agent's filter; dispatched again")
        await self._deps.store.append_trace(
            subject.request, list(labeled.entries), steps=0, usage=labeled.usage, cost=labeled.cost_micros
        )
        return LoopOutcome(
            OutcomeKind.ABORTED,
            abort_reason=CLASSIFICATION_MISMATCH,
            usage=labeled.usage,
            cost_micros=labeled.cost_micros,
            summary=f"Not answered: label {unmet} is outside this agent's classification filter.",
        )

    def _toolbox(self, subject: RunSubject, granted: tuple[str, ...]) -> ToolBox:
        if self._deps.toolbox_factory is not None:
            return self._deps.toolbox_factory(subject, granted)
        if not granted:
            return NoTools()
        request = subject.request
        claims = RunTokenClaims(
            org_id=request.org_id,
            run_id=request.run_id,
            agent_id=request.agent_id,
            conversation_id=request.conversation_id,
            contact_id=request.contact_id,
            channel_session_id=request.channel_session_id,
            tools=frozenset(granted),
            dry_run=request.dry_run,
            expires_at=int(time.time()) + self._token_ttl_s(subject),
        )
        return McpToolBox(
            url=self._settings.mcp_url,
            token=mint_run_token(self._deps.token_secret, claims),
            granted=granted,
            catalog=self._deps.tool_catalog,
            timeout_s=self._settings.tool_call_timeout_s,
        )

    def _token_ttl_s(self, subject: RunSubject) -> int:
        """The run token outlives the longest the run can last: every step a model call and a tool
        call at their timeouts (``RUNNER_MCP_TOKEN_TTL_S`` is the floor). A token that expired
        mid-run would fail its tool calls, and a failing tool server hands the run off."""
        settings = self._settings
        per_step = settings.model_call_timeout_s * settings.provider_max_attempts + settings.tool_call_timeout_s
        return max(settings.mcp_token_ttl_s, int(subject.version.max_steps * per_step) + 300)

    @staticmethod
    def _failed(code: str, message: str) -> LoopOutcome:
        return LoopOutcome(
            OutcomeKind.FAILED, failure=RunFailure(code, message, ErrorFamily.UNKNOWN), summary=f"Failed: {message}."
        )

    # ------------------------------------------------------------------ endings

    async def _keep_usage(self, request: RunRequested, finish: Finish) -> None:
        """The terminal transaction failed for good (the database away longer than its retries): the
        run stays ``running`` and the dispatcher's recovery closes it as lost, counting what its row
        says it spent. A final flush writes no usage (the finish does), so without this a one-step
        run was counted as spending nothing — while the recovery ran the turn and paid again. The
        row's usage and its last entries are written, patiently, while the row is still active."""
        outcome = finish.outcome
        try:
            await _with_db_retries(
                lambda: self._deps.store.append_trace(
                    request,
                    finish.trace_tail,
                    steps=outcome.steps,
                    usage=outcome.usage,
                    cost=outcome.cost_micros,
                    prompt=finish.prompt,
                ),
                attempts=USAGE_KEEP_ATTEMPTS,
            )
        except Exception as exc:
            log.error(
                "run usage not kept: its finish and the fallback both failed",
                extra={"run_id": str(request.run_id), "error": type(exc).__name__},
            )

    async def _finish(
        self,
        subject: RunSubject,
        outcome: LoopOutcome,
        events: RunEvents,
        started_at: datetime,
        clock: float,
        access: ProviderAccess | None,
        labels: dict[str, str],
        steering: RunSteering,
        *,
        autonomy: RunAutonomy | None = None,
        trace: _Trace | None = None,
    ) -> None:
        request = subject.request
        version = subject.version
        outcome = _no_handoff_without_people(subject, outcome)
        classification = classify(outcome)
        # A handoff tells the customer the version's handoff message, if it has one (never the
        # model's own text: it was not written for the customer).
        tells_customer = classification.status is RunStatus.COMPLETED or (
            classification.status is RunStatus.HANDOFF and version.handoff_message is not None
        )
        if classification.status is RunStatus.HANDOFF and version.handoff_message is not None:
            outcome = replace(outcome, final_text=version.handoff_message)
        tail, prompt = trace.closing() if trace is not None else ([], None)
        completed_at = datetime.now(UTC)
        latency_ms = int((time.monotonic() - clock) * 1000)
        invalid = (
            access.credential_id
            if access is not None
            and outcome.failure is not None
            and outcome.failure.code == _AUTH_CODE
            and access.credential_id is not None
            else None
        )
        would_send_to = (
            SendTarget(channel_session_id=subject.conversation.channel_session_id, chat_id=subject.conversation.chat_id)
            if tells_customer
            and outcome.final_text
            and subject.conversation
            # An internal conversation has nobody to send to; a dry run still shows where its reply
            # would go (it is never sent: the notifier skips dry runs).
            and (subject.request.dry_run or not is_internal_chat(subject.conversation.chat_id))
            else None
        )
        finish = Finish(
            outcome=outcome,
            classification=classification,
            provider=version.provider,
            model=version.model,
            started_at=started_at,
            completed_at=completed_at,
            latency_ms=latency_ms,
            would_send_to=would_send_to,
            actions_executed=(
                autonomy.executed_actions(_actions(request, outcome, completed_at))
                if autonomy is not None
                else _actions(request, outcome, completed_at)
            ),
            actions_proposed=tuple(autonomy.proposed) if autonomy is not None else (),
            invalid_credential_id=invalid,
            invalid_credential_iv=access.credential_iv if invalid is not None and access is not None else None,
            trace_tail=tail,
            prompt=prompt,
            steered_message_ids=steering.applied_message_ids,
        )
        try:
            announced = await _with_db_retries(lambda: self._deps.store.finish(subject, finish))
        except Exception:
            await self._keep_usage(request, finish)
            raise
        if not announced:
            log.warning("run superseded by a newer attempt; its outcome is not announced", extra=labels)
        elif autonomy is not None and await _with_db_retries(autonomy.park_if_paused):
            log.info("run parked until the owner decides", extra=labels)
        events.done(classification.status, outcome.summary)
        self._observe(version.provider, outcome, classification.status, latency_ms)
        log.info(
            "run finished",
            extra={
                **labels,
                "status": classification.status.value,
                "vitality": classification.vitality.value,
                "error_family": classification.error_family.value if classification.error_family else None,
                "abort_reason": outcome.abort_reason,
                "error_code": outcome.failure.code if outcome.failure else None,
                "steps": outcome.steps,
                "tokens_in": outcome.usage.all_input,
                "tokens_out": outcome.usage.output_tokens,
                "cost_micros": outcome.cost_micros,
                "latency_ms": latency_ms,
            },
        )

    @staticmethod
    def _crashed(handle: RunHandle, exc: Exception) -> LoopOutcome:
        """A run failed by an error of ours, with what it had spent and done so far: the provider
        billed every step the loop counted (before, the row and the ledger got zeros)."""
        failed = LoopOutcome(
            OutcomeKind.FAILED,
            failure=RunFailure("runner_error", f"internal error ({type(exc).__name__})", ErrorFamily.UNKNOWN),
            summary="Failed: internal error in the runner.",
        )
        if handle.loop is None:
            return failed
        unsaved, so_far = handle.loop.abandon("internal error in the runner")
        if handle.trace is not None:
            handle.trace.keep(unsaved)
        return replace(so_far, kind=failed.kind, failure=failed.failure, summary=failed.summary, final_text=None)

    async def _hand_back(self, handle: RunHandle, subject: RunSubject, started_at: datetime, clock: float) -> None:
        entries: list[dict[str, object]] = []
        prompt: dict[str, Any] | None = None
        if handle.trace is not None:  # entries kept for a finish that will not come
            entries, prompt = handle.trace.closing()
        outcome = LoopOutcome(OutcomeKind.HANDED_BACK, summary="Stopped: runner shutdown.")
        if handle.loop is not None:
            abandoned, outcome = handle.loop.abandon("runner shutdown")
            entries = [*entries, *abandoned]
        finish = Finish(
            outcome=outcome,
            classification=classify(outcome),
            provider=subject.version.provider,
            model=subject.version.model,
            started_at=started_at,
            completed_at=datetime.now(UTC),
            latency_ms=int((time.monotonic() - clock) * 1000),
            would_send_to=None,
            trace_tail=entries,
            prompt=prompt,
        )
        code = SUPERSEDED if handle.superseded else RUNNER_SHUTDOWN
        try:
            await self._deps.store.hand_back(subject, finish, error_code=code)
        except Exception as exc:
            log.error("hand back not recorded", extra={**_labels(subject.request), "error": type(exc).__name__})
        log.warning("run handed back", extra={**_labels(subject.request), "error_code": code})

    @staticmethod
    def _observe(provider: str, outcome: LoopOutcome, status: RunStatus, latency_ms: int) -> None:
        RUNS_TOTAL.labels(status.value, provider).inc()
        if status is RunStatus.FAILED and outcome.failure is not None:
            RUNS_FAILED.labels(outcome.failure.code).inc()
        if status is RunStatus.HANDOFF and outcome.handoff is not None:
            RUNS_HANDOFF.labels(outcome.handoff.trigger.value).inc()
        RUN_LATENCY.observe(latency_ms / 1000)
        usage: TokenUsage = outcome.usage
        RUN_TOKENS.labels(provider, "in").inc(usage.all_input)
        RUN_TOKENS.labels(provider, "out").inc(usage.output_tokens)
        RUN_COST.labels(provider).inc(outcome.cost_micros)
        TOOL_CALLS.observe(outcome.tool_calls)


_AUTH_CODE = ProviderError(ProviderErrorKind.AUTH, provider="any").code


# A run whose terminal transaction failed for good keeps what it spent on its row for this long
# (the recovery that closes it as lost counts the row): a failover's length, well inside a lease.
USAGE_KEEP_ATTEMPTS = 9  # 0.2 s doubling: about 100 s in all


async def _with_db_retries(action: Callable[[], Awaitable[T]], *, attempts: int = 4) -> T:
    """Run one transaction, again after a transient database error (deadlock victim, lost
    connection, serialization failure, no pooled connection free in time — a burst of runs);
    constraint violations are not transient and raise at once."""
    for attempt in range(1, attempts + 1):
        try:
            return await action()
        except IntegrityError:
            raise
        except PoolTimeout:
            if attempt == attempts:
                raise
            log.warning("database pool exhausted, retrying", extra={"attempt": attempt})
            await asyncio.sleep(0.1 * 2**attempt)
        except DBAPIError as exc:
            if attempt == attempts or not (exc.connection_invalidated or _transient(exc)):
                raise
            log.warning("database error, retrying", extra={"attempt": attempt, "error": type(exc.orig).__name__})
            await asyncio.sleep(0.1 * 2**attempt)
    raise AssertionError("unreachable")


def _transient(exc: DBAPIError) -> bool:
    return isinstance(exc, OperationalError) or getattr(exc.orig, "sqlstate", None) in {"40001", "40P01"}


def _tool_server_down() -> LoopOutcome:
    failure = RunFailure(ToolServerUnavailable.code, "the tool server is unavailable", ErrorFamily.TOOL_FAILURE)
    return LoopOutcome(
        OutcomeKind.HANDOFF,
        failure=failure,
        handoff=HandoffRequest(
            reason="The tool server is unavailable; a person should take over.",
            urgency=Urgency.HIGH,
            trigger=HandoffTrigger.TOOL,
            failure=failure,
        ),
        summary="Handed off before any model call: the tool server is unavailable.",
    )


def _actions(request: RunRequested, outcome: LoopOutcome, at: datetime) -> tuple[Action, ...]:
    """Business actions that ran successfully: the autonomy-gated write tools, each in its area
    (never in a dry run, where nothing is executed). The ungated writes — asking for a person,
    saving a memory fact, publishing insights — are the agent's own bookkeeping, not actions the
    Home reports as done (they stay in the trace)."""
    if request.dry_run:
        return ()
    actions: list[Action] = []
    for call in outcome.calls:
        area = gated_area(call.tool_name)
        if area is None or call.is_error:
            continue
        actions.append(
            Action(
                action_id=uuid.uuid5(request.run_id, call.call_id),
                action_type=call.tool_name,
                tool_name=call.tool_name,
                area=area,
                summary=f"{call.tool_name} executed by the agent",
                arguments_json=call.arguments_json,
                executed_at=at,
            )
        )
    return tuple(actions)


_STEP_EVENTS: dict[object, str] = {"model": "model_called", "tool": "tool_called", "guard": "guard_triggered"}


def _log_steps(request: RunRequested, entries: list[dict[str, object]]) -> None:
    """One structured line per trace entry [004 §8.3]: which step did what, with its tokens and cost.

    Ids, names and figures only — never the text, the arguments or a tool's result (customer
    words and whatever a tool returned stay in the run's trace, behind the API's roles)."""
    for entry in entries:
        kind = entry.get("kind")
        line: dict[str, object] = {
            **_labels(request),
            "step_index": entry.get("step"),
            "event": _STEP_EVENTS.get(kind, str(kind)),
        }
        if kind == "model":
            line |= {key: entry.get(key) for key in ("tokens_in", "tokens_out", "cost_micros", "duration_ms")}
            line["stop_reason"] = entry.get("stop_reason")
        elif kind == "tool":
            line |= {"tool_name": entry.get("tool_name"), "is_error": entry.get("is_error")}
            line["duration_ms"] = entry.get("duration_ms")
        else:
            line["guard"] = entry.get("name")
        log.info("run step", extra=line)


def _not_run(handle: RunHandle) -> LoopOutcome | None:
    """The outcome of a claimed run that must not run at all, or None: its messages were answered
    (a recovery attempt), its contact was erased, people own its conversation."""
    if handle.answered_by is not None:
        reason, why = ALREADY_ANSWERED, f"run {handle.answered_by} already answered these messages"
    elif handle.contact_erased:
        reason, why = CONTACT_ERASED, "the customer's data was erased"
    elif handle.with_humans:
        reason, why = WITH_HUMANS, "a person had taken the conversation over"
    else:
        return None
    return LoopOutcome(OutcomeKind.ABORTED, abort_reason=reason, summary=f"Not run: {why}.")


def _no_handoff_without_people(subject: RunSubject, outcome: LoopOutcome) -> LoopOutcome:
    """No person answers an internal conversation (the daily analysis): a handoff there — the model's
    request_human_handoff, or the tool server down during a deploy — set it to ``handoff`` for good,
    the dispatcher refused every later day's analysis and nobody could hand it back (it is not in
    the inbox). Such a run ends ``aborted`` (``handoff_unavailable``) instead. A dry run keeps its
    handoff: the editor's test shows that the version would hand off."""
    conversation = subject.conversation
    if (
        outcome.kind is not OutcomeKind.HANDOFF
        or subject.request.dry_run
        or conversation is None
        or not is_internal_chat(conversation.chat_id)
    ):
        return outcome
    reason = outcome.handoff.reason if outcome.handoff else "a handoff"
    return replace(
        outcome,
        kind=OutcomeKind.ABORTED,
        abort_reason=HANDOFF_UNAVAILABLE,
        handoff=None,
        final_text=None,
        summary=f"Not handed off (no person answers an internal conversation): {reason}",
    )


class _Trace:
    """The loop's :class:`~services.runner.loop.TraceSink`: appends to the run row, tracks steps.

    The run's final entries (and the prompt, if no append wrote it yet) are kept for the
    terminal transaction (:meth:`closing`), which writes them with the outcome: a one-step
    run writes its trace in its finish, not in a transaction of its own."""

    def __init__(
        self, store: RunStore, request: RunRequested, handle: RunHandle, *, prompt: dict[str, Any] | None = None
    ) -> None:
        self._store = store
        self._request = request
        self._handle = handle
        self._prompt = prompt  # stored with the first write (issue 6)
        self._tail: list[dict[str, object]] = []

    async def append(
        self, entries: list[dict[str, object]], *, steps: int, usage: TokenUsage, cost: int, final: bool = False
    ) -> None:
        self._handle.status = "running"
        _log_steps(self._request, entries)
        if final:
            self._tail.extend(entries)
            return
        prompt, self._prompt = self._prompt, None
        # Retried like every transaction of the run: a database blip between two steps must not
        # fail a run the provider is answering (a retry after a COMMIT that landed but whose
        # answer was lost appends nothing: append_trace is idempotent; usage columns are set).
        await _with_db_retries(
            lambda: self._store.append_trace(self._request, entries, steps=steps, usage=usage, cost=cost, prompt=prompt)
        )

    def keep(self, entries: list[dict[str, object]]) -> None:
        """Entries the terminal transaction is to write (a crashed loop's unsaved trace)."""
        self._tail.extend(entries)

    def closing(self) -> tuple[list[dict[str, object]], dict[str, Any] | None]:
        """What the terminal transaction writes: the kept entries and the prompt not written yet."""
        tail, prompt = self._tail, self._prompt
        self._tail, self._prompt = [], None
        return tail, prompt
