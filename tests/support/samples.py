"""Sample records and ids shared by the contract tests (a module, not conftest, so it can be imported)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

from switchboard.contracts import (
    Action,
    AgentPublished,
    AgentVersionSnapshot,
    AgentVersionStatus,
    BusinessHours,
    ConcurrencyPolicy,
    DeadLetter,
    DispatchDecided,
    DispatcherTick,
    DispatchOutcome,
    DispatchRequested,
    ErrorFamily,
    FollowUpConfig,
    HandoffTrigger,
    HandoffTriggered,
    Header,
    HumanMessageRequested,
    InboundMessage,
    Insight,
    InsightKind,
    PublishedChange,
    Record,
    RunCompleted,
    RunEvent,
    RunEventType,
    RunHeartbeat,
    RunRequested,
    RunStarted,
    RunStatus,
    SendTarget,
    SteeringKind,
    SteeringMessage,
    SuggestedAction,
    ToolCall,
    TriggerConfig,
    Urgency,
    UsageDelta,
    Vitality,
    WakeContext,
    WakeReason,
    Weekday,
    WeeklyWindow,
)

FIXTURES = Path(__file__).resolve().parents[1] / "unit" / "contracts" / "fixtures"

ORG = UUID("0b6c7a52-1d1e-4c55-9d1a-4b9f0e1d2c3a")
CONVERSATION = UUID("5f0c2a51-8f7e-4a8d-9c47-1b2a3c4d5e6f")
CONTACT = UUID("9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d")
SESSION = UUID("1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f")
AGENT = UUID("7e6d5c4b-3a29-4817-9605-f4e3d2c1b0a9")
VERSION = UUID("2b3c4d5e-6f70-4182-93a4-b5c6d7e8f901")
RUN = UUID("3c4d5e6f-7081-4293-a4b5-c6d7e8f90a1b")
NOW = datetime(2025, 3, 14, 9, 26, 53, 589000, tzinfo=UTC)


def load_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _message(text: str = "Oi, quero remarcar meu horário") -> InboundMessage:
    return InboundMessage(
        message_id=uuid4(), external_id="wamid.HBgM", chat_id="5511999999999@c.us", text=text, received_at=NOW
    )


def _action(executed: bool) -> Action:
    return Action(
        action_id=uuid4(),
        action_type="send_reminder",
        tool_name="crm_send_whatsapp_message",
        area="booking",
        summary="Sent a reminder to Ana",
        arguments_json='{"chat":"x"}',
        executed_at=NOW if executed else None,
    )


def realistic_records() -> list[Record]:
    """One realistic, fully populated record per topic (the hand-written side of the tests)."""
    message = _message()
    snapshot = AgentVersionSnapshot(
        version_id=VERSION,
        agent_id=AGENT,
        version_number=3,
        agent_name="Recepção",
        priority=10,
        agent_created_at=NOW,
        system_prompt="Você é a recepção da clínica.",
        provider="anthropic",
        model="claude-sonnet-4-6",
        credential_id=None,
        tool_ids=("crm_search_contacts", "crm_request_human_handoff"),
        trigger=TriggerConfig(
            event_types=("message",),
            keyword_regex="(?i)agendar",
            business_hours=BusinessHours(
                time_zone="America/Sao_Paulo",
                windows=(
                    WeeklyWindow(weekday=Weekday.MONDAY, start_minute=540, end_minute=1080),
                    WeeklyWindow(weekday=Weekday.SATURDAY, start_minute=540, end_minute=720),
                ),
            ),
        ),
        channel_session_id=SESSION,
        max_steps=10,
        token_budget=50_000,
        cost_budget_cents=50,
        history_message_window=20,
        history_token_window=8000,
        handoff_keywords=("falar com humano", "atendente", "pessoa real"),
        followup=FollowUpConfig(flow_pointer_ids=("flow-1",)),
        concurrency_policy=ConcurrencyPolicy.STEER,
        status=AgentVersionStatus.PUBLISHED,
        created_at=NOW,
        published_at=NOW,
    )
    return [
        DispatchRequested(
            org_id=ORG,
            request_id="req-1",
            conversation_id=CONVERSATION,
            contact_id=CONTACT,
            channel_session_id=SESSION,
            wake_reason=WakeReason.USER_MESSAGE,
            wake_context=WakeContext(message_id=message.message_id),
            message=message,
        ),
        RunRequested(
            org_id=ORG,
            conversation_id=CONVERSATION,
            contact_id=CONTACT,
            channel_session_id=SESSION,
            run_id=RUN,
            agent_id=AGENT,
            version_id=VERSION,
            attempt=2,
            parent_run_id=uuid4(),
            wake_reason=WakeReason.RECOVERY,
            wake_context=WakeContext(run_id=uuid4()),
            messages=(message, _message("e aí?")),
            dispatch_ids=(uuid4(), uuid4()),
        ),
        RunStarted(
            org_id=ORG,
            conversation_id=CONVERSATION,
            run_id=RUN,
            agent_id=AGENT,
            version_id=VERSION,
            wake_reason=WakeReason.USER_MESSAGE,
            provider="anthropic",
            model="claude-sonnet-4-6",
            runner_id="runner-0",
            started_at=NOW,
        ),
        RunEvent(
            org_id=ORG,
            conversation_id=CONVERSATION,
            run_id=RUN,
            agent_id=AGENT,
            seq=4,
            type=RunEventType.TOOL_CALL,
            tool_call=ToolCall(tool_call_id="toolu_1", tool_name="crm_search_contacts", arguments_json='{"q":"Ana"}'),
        ),
        RunEvent(
            org_id=ORG,
            conversation_id=CONVERSATION,
            run_id=RUN,
            agent_id=AGENT,
            seq=5,
            type=RunEventType.USAGE,
            usage=UsageDelta(
                tokens_in=1200, tokens_out=80, cache_read_tokens=4000, cost_micro_usd=5_430, model="claude-sonnet-4-6"
            ),
        ),
        RunCompleted(
            org_id=ORG,
            conversation_id=CONVERSATION,
            contact_id=CONTACT,
            channel_session_id=SESSION,
            run_id=RUN,
            agent_id=AGENT,
            version_id=VERSION,
            wake_reason=WakeReason.USER_MESSAGE,
            message_ids=(message.message_id,),
            status=RunStatus.ABORTED,
            vitality=Vitality.LOOPING,
            error_family=ErrorFamily.BUDGET_EXCEEDED,
            error_code="token_budget",
            abort_reason="token_budget_exceeded",
            final_text="Claro! Qual dia?",
            would_send_to=SendTarget(channel_session_id=SESSION, chat_id="5511@c.us"),
            provider="anthropic",
            model="claude-sonnet-4-6",
            tokens_in=51_000,
            tokens_out=900,
            cache_write_tokens=3000,
            cost_micro_usd=2_147_483_648_000,
            latency_ms=3200,
            steps=7,
            tool_calls=9,
            actions_executed=(_action(True),),
            actions_proposed=(_action(False),),
            dry_run=True,
            started_at=NOW,
            completed_at=NOW,
        ),
        HandoffTriggered(
            org_id=ORG,
            conversation_id=CONVERSATION,
            contact_id=CONTACT,
            channel_session_id=SESSION,
            run_id=RUN,
            agent_id=AGENT,
            version_id=VERSION,
            reason="Cliente pediu um atendente",
            urgency=Urgency.HIGH,
            trigger=HandoffTrigger.KEYWORD,
            matched_keyword="atendente",
        ),
        HumanMessageRequested(
            org_id=ORG,
            conversation_id=CONVERSATION,
            channel_session_id=SESSION,
            chat_id="5511999999999@c.us",
            message_id=uuid4(),
            sent_by_user_id=uuid4(),
        ),
        AgentPublished(
            org_id=ORG,
            agent_id=AGENT,
            change=PublishedChange.PUBLISHED,
            version=snapshot,
            previous_version_id=uuid4(),
            changed_by_user_id=uuid4(),
        ),
        Insight(
            org_id=ORG,
            insight_id=uuid4(),
            insight_key="no_show_rate_high",
            insight_date=date(2025, 3, 14),
            kind=InsightKind.PROPOSED_ACTION,
            area="booking",
            title="3 no-shows esta semana",
            body="Sugiro lembretes na véspera.",
            suggested_actions=(SuggestedAction(action_type="send_reminder", label="Aprovar", arguments_json="{}"),),
            proposed_action=_action(False),
            agent_id=AGENT,
            run_id=RUN,
        ),
        SteeringMessage(
            org_id=ORG,
            conversation_id=CONVERSATION,
            run_id=RUN,
            kind=SteeringKind.GUIDANCE,
            text="e amanhã?",
            source_message=_message("e amanhã?"),
        ),
        DeadLetter(
            org_id=None,
            original_topic="t1-dispatch_requested",
            original_partition=3,
            original_offset=42,
            original_timestamp=NOW,
            original_key=b"\xffnot-utf8",
            original_value=b"\x01garbage",
            original_headers=(Header(key="traceparent", value=b"00-abc"), Header(key="empty")),
            error_code="bad_magic_byte",
            error_message="first byte is 0x01",
            failed_at=NOW,
            service="dispatcher",
            consumer_group="dispatcher",
            attempts=1,
        ),
        RunHeartbeat(
            org_id=ORG,
            conversation_id=CONVERSATION,
            run_id=RUN,
            agent_id=AGENT,
            attempt=2,
            runner_id="runner-7f9c-0",
            steps=3,
        ),
        DispatcherTick(
            org_id=ORG,
            conversation_id=CONVERSATION,
            due_at=NOW,
            worker_id="dispatcher-host-4242",
        ),
        DispatchDecided(
            org_id=ORG,
            request_id="req-1",
            conversation_id=CONVERSATION,
            dispatch_event_id=uuid4(),
            outcome=DispatchOutcome.RATE_LIMITED,
            message_ids=(message.message_id,),
            dispatch_ids=(uuid4(),),
            agent_id=AGENT,
            version_id=VERSION,
            run_id=None,
            attempt=None,
            wake_reason=WakeReason.USER_MESSAGE,
            reason="org rate limit: 60 runs per 60 s window reached",
            not_before=NOW,
            details_json='{"limit":"org","limit_per_window":60}',
        ),
    ]
