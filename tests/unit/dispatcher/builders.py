"""Builders for the dispatcher's unit tests: agents, dispatches, run events, a context."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from services.dispatcher.agents import AgentIndex
from services.dispatcher.limits import Admission, BudgetView, Grant
from services.dispatcher.policy import Context, PolicyConfig, queue_unknown
from switchboard.contracts import (
    AgentPublished,
    AgentVersionSnapshot,
    AgentVersionStatus,
    BusinessHours,
    ConcurrencyPolicy,
    DispatchRequested,
    ErrorFamily,
    FollowUpConfig,
    InboundMessage,
    PublishedChange,
    RunCompleted,
    RunHeartbeat,
    RunStarted,
    RunStatus,
    TriggerConfig,
    Vitality,
    WakeContext,
    WakeReason,
)

ORG = uuid.UUID("11111111-1111-4111-8111-111111111111")
OTHER_ORG = uuid.UUID("22222222-2222-4222-8222-222222222222")
SESSION = uuid.UUID("33333333-3333-4333-8333-333333333333")
OTHER_SESSION = uuid.UUID("44444444-4444-4444-8444-444444444444")
CONVERSATION = uuid.UUID("55555555-5555-4555-8555-555555555555")
CONTACT = uuid.UUID("66666666-6666-4666-8666-666666666666")
# A Monday, 12:00 UTC (09:00 in America/Sao_Paulo, UTC-3).
T0 = datetime(2026, 3, 2, 12, 0, 0, tzinfo=UTC)


def agent_id(n: int) -> uuid.UUID:
    return uuid.UUID(int=0xA000_0000_0000_4000_8000_0000_0000_0000 + n)


def snapshot(
    n: int,
    *,
    org: uuid.UUID = ORG,
    session: uuid.UUID = SESSION,
    priority: int = 0,
    created_at: datetime = T0 - timedelta(days=30),
    trigger: TriggerConfig | None = None,
    policy: ConcurrencyPolicy = ConcurrencyPolicy.ENQUEUE,
) -> AgentVersionSnapshot:
    return AgentVersionSnapshot(
        version_id=uuid.UUID(int=0xB000_0000_0000_4000_8000_0000_0000_0000 + n),
        agent_id=agent_id(n),
        version_number=1,
        agent_name=f"agent-{n}",
        priority=priority,
        agent_created_at=created_at,
        system_prompt="You answer.",
        provider="demo",
        model="demo-1",
        tool_ids=(),
        trigger=trigger or TriggerConfig(event_types=("message",)),
        channel_session_id=session,
        max_steps=5,
        token_budget=10_000,
        cost_budget_cents=10,
        history_message_window=10,
        history_token_window=1000,
        handoff_keywords=(),
        followup=FollowUpConfig(),
        concurrency_policy=policy,
        status=AgentVersionStatus.PUBLISHED,
        created_at=created_at,
        published_at=created_at,
    )


def published(
    snap: AgentVersionSnapshot, *, org: uuid.UUID = ORG, change: PublishedChange = PublishedChange.PUBLISHED
) -> AgentPublished:
    return AgentPublished(org_id=org, agent_id=snap.agent_id, change=change, version=snap)


def index_of(*snaps: AgentVersionSnapshot, org: uuid.UUID | None = None) -> AgentIndex:
    index = AgentIndex()
    for snap in snaps:
        index.apply(published(snap, org=org or ORG))
    return index


def message(
    text: str = "Oi, quero agendar",
    *,
    at: datetime = T0,
    from_me: bool = False,
    is_group: bool = False,
    n: int | None = None,
) -> InboundMessage:
    mid = uuid.uuid4() if n is None else uuid.UUID(int=0xC000_0000_0000_4000_8000_0000_0000_0000 + n)
    return InboundMessage(
        message_id=mid,
        external_id=f"wamid.{mid.hex[:8]}",
        chat_id="5511999999999@c.us",
        text=text,
        received_at=at,
        from_me=from_me,
        is_group=is_group,
    )


def dispatch(
    text: str = "Oi, quero agendar",
    *,
    org: uuid.UUID = ORG,
    conversation: uuid.UUID = CONVERSATION,
    session: uuid.UUID = SESSION,
    at: datetime = T0,
    msg: InboundMessage | None = None,
    wake: WakeReason = WakeReason.USER_MESSAGE,
    dry_run: bool = False,
    target: uuid.UUID | None = None,
    target_version: uuid.UUID | None = None,
    **message_kw: Any,
) -> DispatchRequested:
    m = msg if msg is not None else (message(text, at=at, **message_kw) if wake is WakeReason.USER_MESSAGE else None)
    return DispatchRequested(
        org_id=org,
        conversation_id=conversation,
        contact_id=CONTACT,
        channel_session_id=session,
        wake_reason=wake,
        wake_context=WakeContext(message_id=m.message_id if m else None),
        message=m,
        dry_run=dry_run,
        target_agent_id=target,
        target_version_id=target_version,
        occurred_at=at,
    )


def started(run_id: uuid.UUID, agent: uuid.UUID, version: uuid.UUID, *, at: datetime = T0) -> RunStarted:
    return RunStarted(
        org_id=ORG,
        conversation_id=CONVERSATION,
        run_id=run_id,
        agent_id=agent,
        version_id=version,
        wake_reason=WakeReason.USER_MESSAGE,
        provider="demo",
        model="demo-1",
        runner_id="runner-test",
        started_at=at,
    )


def heartbeat(run_id: uuid.UUID, agent: uuid.UUID) -> RunHeartbeat:
    return RunHeartbeat(
        org_id=ORG, conversation_id=CONVERSATION, run_id=run_id, agent_id=agent, runner_id="runner-test"
    )


def completed(
    run_id: uuid.UUID,
    agent: uuid.UUID,
    version: uuid.UUID,
    *,
    status: RunStatus = RunStatus.COMPLETED,
    message_ids: tuple[uuid.UUID, ...] = (),
    error_family: ErrorFamily | None = None,
    abort_reason: str | None = None,
    dry_run: bool = False,
    at: datetime = T0,
) -> RunCompleted:
    return RunCompleted(
        org_id=ORG,
        conversation_id=CONVERSATION,
        contact_id=CONTACT,
        channel_session_id=SESSION,
        run_id=run_id,
        agent_id=agent,
        version_id=version,
        wake_reason=WakeReason.USER_MESSAGE,
        message_ids=message_ids,
        status=status,
        vitality=Vitality.COMPLETED if status is RunStatus.COMPLETED else Vitality.FAILED,
        error_family=error_family,
        abort_reason=abort_reason,
        provider="demo",
        model="demo-1",
        tokens_in=1,
        tokens_out=1,
        cost_micro_usd=0,
        latency_ms=10,
        steps=1,
        dry_run=dry_run,
        started_at=at,
        completed_at=at,
    )


def context(
    index: AgentIndex,
    *,
    now: datetime = T0,
    over_budget: dict[uuid.UUID, str] | None = None,
    admission: Admission | None = None,
    config: PolicyConfig | None = None,
    judge_leases_from: datetime | None = None,
    queued: Callable[[uuid.UUID], bool | None] = queue_unknown,
) -> Context:
    return Context(
        now=now,
        index=index,
        budgets=BudgetView(over_budget or {}, now),
        admission=admission or Admission.unlimited(),
        config=config or PolicyConfig(lease_s=30.0, max_attempts=3, reply_interval_s=5.0),
        judge_leases_from=judge_leases_from,
        queued=queued,
    )


def granted(n: int, *, org: uuid.UUID = ORG, window_end: datetime = T0 + timedelta(seconds=60)) -> Admission:
    return Admission.granted({org: Grant(n, window_end)}, fallback_retry_at=window_end)


def business_hours(zone: str, *windows: tuple[str, int, int]) -> BusinessHours:
    from switchboard.contracts import Weekday, WeeklyWindow

    return BusinessHours(
        time_zone=zone,
        windows=tuple(WeeklyWindow(weekday=Weekday(d), start_minute=s, end_minute=e) for d, s, e in windows),
    )
