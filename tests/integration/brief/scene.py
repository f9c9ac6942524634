"""Rows and records of one brief scenario: an org (in a time zone) with one published agent,
plus builders of the records the brief consumes and a brief running in-process."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import select

from services.brief.service import Brief
from services.brief.settings import BriefSettings
from switchboard.contracts.enums import HandoffTrigger, RunStatus, Urgency, Vitality, WakeReason
from switchboard.contracts.records import Action, HandoffTriggered, Insight, RunCompleted, SendTarget
from switchboard.db.models.agents import AiAgent, AiAgentVersion
from switchboard.db.models.autonomy import WorkspaceDailyBrief
from switchboard.db.models.channels import ChannelSession, Contact, Conversation
from switchboard.db.models.tenancy import Organization
from switchboard.settings import DatabaseSettings, KafkaSettings
from tests.support.agents import tenant_session
from tests.support.api import OrgHandle, create_org


@dataclass
class Scene:
    org: OrgHandle
    channel_session_id: uuid.UUID
    contact_id: uuid.UUID
    conversation_id: uuid.UUID
    agent_id: uuid.UUID
    version_id: uuid.UUID

    @property
    def org_id(self) -> uuid.UUID:
        return self.org.org_id


def make_scene(database_url: str, *, time_zone: str = "UTC", monthly_budget_micros: int | None = None) -> Scene:
    org = create_org(database_url)
    with tenant_session(org) as session:
        session.get_one(Organization, org.org_id).time_zone = time_zone
        channel = ChannelSession(
            org_id=org.org_id, external_session=f"s-{uuid.uuid4().hex[:12]}", label="Main", status="working"
        )
        contact = Contact(org_id=org.org_id, external_id=f"55{uuid.uuid4().int % 10**11:011d}@c.us")
        session.add_all([channel, contact])
        session.flush()
        conversation = Conversation(
            org_id=org.org_id, channel_session_id=channel.id, contact_id=contact.id, chat_id=contact.external_id
        )
        agent = AiAgent(org_id=org.org_id, name="Receptionist", monthly_budget_micros=monthly_budget_micros)
        session.add_all([conversation, agent])
        session.flush()
        version = AiAgentVersion(
            org_id=org.org_id,
            agent_id=agent.id,
            version_number=1,
            system_prompt="You book appointments.",
            provider="anthropic",
            model="claude-haiku-4-5",
            channel_session_id=channel.id,
            status="published",
            published_at=datetime.now().astimezone(),
        )
        session.add(version)
        session.flush()
        agent.published_version_id = version.id
        session.flush()
        return Scene(org, channel.id, contact.id, conversation.id, agent.id, version.id)


def action(action_type: str, area: str, *, summary: str = "") -> Action:
    return Action(
        action_id=uuid.uuid4(),
        action_type=action_type,
        tool_name=action_type,
        area=area,
        summary=summary or action_type,
        arguments_json="{}",
    )


def run_completed(
    scene: Scene,
    completed_at: datetime,
    *,
    cost: int,
    reply: bool = True,
    status: RunStatus = RunStatus.COMPLETED,
    executed: Sequence[Action] = (),
    proposed: Sequence[Action] = (),
    dry_run: bool = False,
    run_id: uuid.UUID | None = None,
    tokens: tuple[int, int] = (100, 20),
) -> RunCompleted:
    return RunCompleted(
        org_id=scene.org_id,
        conversation_id=scene.conversation_id,
        contact_id=scene.contact_id,
        channel_session_id=scene.channel_session_id,
        run_id=run_id or uuid.uuid4(),
        agent_id=scene.agent_id,
        version_id=scene.version_id,
        wake_reason=WakeReason.USER_MESSAGE,
        status=status,
        vitality=Vitality.COMPLETED,
        final_text="See you at 10!" if reply else None,
        would_send_to=SendTarget(channel_session_id=scene.channel_session_id, chat_id="5511@c.us") if reply else None,
        provider="anthropic",
        model="claude-haiku-4-5",
        tokens_in=tokens[0],
        tokens_out=tokens[1],
        cost_micro_usd=cost,
        latency_ms=900,
        steps=1,
        actions_executed=tuple(executed),
        actions_proposed=tuple(proposed),
        dry_run=dry_run,
        started_at=completed_at,
        completed_at=completed_at,
        occurred_at=completed_at,
    )


def handoff(scene: Scene, run: RunCompleted) -> HandoffTriggered:
    return HandoffTriggered(
        org_id=scene.org_id,
        conversation_id=scene.conversation_id,
        contact_id=scene.contact_id,
        channel_session_id=scene.channel_session_id,
        run_id=run.run_id,
        agent_id=scene.agent_id,
        version_id=scene.version_id,
        reason="Customer asked for a human",
        urgency=Urgency.NORMAL,
        trigger=HandoffTrigger.KEYWORD,
        occurred_at=run.completed_at,
    )


def insight(scene: Scene, key: str, day: date, at: datetime, **fields: Any) -> Insight:
    values: dict[str, Any] = {"kind": "insight", "area": "crm", "title": key, "body": ""}
    values.update(fields)
    return Insight(
        org_id=scene.org_id,
        insight_id=uuid.uuid4(),
        insight_key=key,
        insight_date=day,
        occurred_at=at,
        **values,
    )


def stored_digest(scene: Scene, day: date) -> dict[str, Any] | None:
    with tenant_session(scene.org) as session:
        row = session.scalars(
            select(WorkspaceDailyBrief).where(
                WorkspaceDailyBrief.org_id == scene.org_id, WorkspaceDailyBrief.day == day
            )
        ).one_or_none()
        return None if row is None else dict(row.digest)


async def wait_for(check: Callable[[], Any], *, timeout_s: float = 30.0, what: str = "condition") -> Any:
    """Poll ``check`` until it returns a truthy value (the brief works asynchronously)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def running_brief(
    database_url: str, kafka: KafkaSettings, group_id: str, *, morning_interval_s: float = 0
) -> AsyncIterator[Brief]:
    """A brief in this process; the morning pass is off unless asked for (it would compose
    today's digest of every org of the shared test database)."""
    settings = BriefSettings(
        kafka=kafka,
        database=DatabaseSettings(url=database_url),
        group_id=group_id,
        morning_interval_s=morning_interval_s,
    )
    brief = Brief(settings)
    stop = asyncio.Event()
    task = asyncio.create_task(brief.serve(stop))
    try:
        await brief.wait_started()
        yield brief
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
