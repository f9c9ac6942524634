"""The analysis agent's tools (docs/analysis.md): aggregated data in, insights out.

- ``analytics_area_summary(area, days)`` (read): counts and sums over the org's runs,
  messages, conversations, proposed/executed decisions and insights of the last ``days``
  days. Only numbers and enum labels leave the database — never a message body, a name, a
  phone number or an e-mail — so there is nothing to pseudonymize.
- ``insights_publish(items)`` (write, not autonomy-gated: it writes only our own
  ``workspace_insights``, nothing a customer sees): each item is upserted by a stable key
  (``analysis:<area>:<key>``) and an ``insights`` record goes through the outbox in the
  same transaction. A re-run refreshes content and keeps the owner's status
  (seen/dismissed/actioned: ``switchboard.db.insights.upsert_insight``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from pydantic import BaseModel, Field, ValidationError
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session

from services.api.mcp.tools import ToolFailure, ensure_run_going
from switchboard.areas import area_slugs, is_area
from switchboard.autonomy import InsightNote, publish_insight
from switchboard.contracts import Serde
from switchboard.contracts.enums import InsightKind
from switchboard.contracts.records import SuggestedAction
from switchboard.db.daily_brief import local_day, org_zone
from switchboard.db.enums import MessageDirection
from switchboard.db.models import AgentDecision, AiAgentRun, Conversation, Message, WorkspaceInsight
from switchboard.db.session import async_tenant_transaction
from switchboard.internal_chats import INTERNAL_CHAT_PREFIX
from switchboard.run_tokens import RunTokenClaims
from switchboard.settings import KafkaSettings

MAX_DAYS: Final = 90
MAX_ITEMS: Final = 20
KEY_PREFIX: Final = "analysis"
_KEY = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


class ActionItem(BaseModel):
    """A suggested action as the model writes it."""

    action_type: str = Field(min_length=1, max_length=64)
    label: str = Field(min_length=1, max_length=200)
    arguments: dict[str, Any] = Field(default_factory=dict)


class InsightItem(BaseModel):
    """One finding: ``key`` names it stably across runs (the same finding, the same key)."""

    key: str = Field(min_length=1, max_length=64)
    area: str
    title: str = Field(min_length=1, max_length=200)
    body: str = Field(default="", max_length=4000)
    suggested_actions: list[ActionItem] = Field(default_factory=list, max_length=5)


def insight_key(area: str, key: str) -> str:
    """The stable dedupe key of an analysis insight: re-running the analysis finds the same row."""
    return f"{KEY_PREFIX}:{area}:{key}"


def _counts(session: Session, column: Any, *where: Any) -> dict[str, int]:
    rows = session.execute(select(column, func.count()).where(*where).group_by(column)).all()
    return {str(key): int(count) for key, count in sorted(rows, key=lambda r: str(r[0]))}


def area_summary(session: Session, org_id: Any, area: str, days: int, now: datetime) -> dict[str, Any]:
    """The aggregates of one area over ``days`` days, in the caller's tenant transaction."""
    since = now - timedelta(days=days)
    live_runs = (AiAgentRun.org_id == org_id, AiAgentRun.created_at >= since, AiAgentRun.is_dry_run.is_(False))
    cost = session.scalar(select(func.coalesce(func.sum(AiAgentRun.cost_micros), 0)).where(*live_runs))
    # Customers' conversations only: the editor's dry-run tests and the analysis itself are
    # Switchboard's own chats (an owner testing all day read as "inbound up 40%").
    customers = Conversation.chat_id.not_like(f"{INTERNAL_CHAT_PREFIX}%")
    message_rows = session.execute(
        select(Message.direction, func.count())
        .join(Conversation, (Conversation.org_id == Message.org_id) & (Conversation.id == Message.conversation_id))
        .where(Message.org_id == org_id, Message.occurred_at >= since, customers)
        .group_by(Message.direction)
    ).all()
    messages = {str(key): int(count) for key, count in sorted(message_rows, key=lambda r: str(r[0]))}
    conversations = session.scalar(
        select(func.count()).where(
            Conversation.org_id == org_id,
            Conversation.last_message_at >= since,
            Conversation.is_group.is_(False),
            customers,
        )
    )
    decisions: dict[str, dict[str, int]] = {}
    rows = session.execute(
        select(AgentDecision.action_type, AgentDecision.status, func.count())
        .where(AgentDecision.org_id == org_id, AgentDecision.area == area, AgentDecision.created_at >= since)
        .group_by(AgentDecision.action_type, AgentDecision.status)
    ).all()
    for action_type, status, count in sorted(rows, key=lambda r: (r[0], r[1])):
        decisions.setdefault(str(action_type), {})[str(status)] = int(count)
    return {
        "area": area,
        "days": days,
        "since": since.astimezone(UTC).isoformat(timespec="seconds"),
        "until": now.astimezone(UTC).isoformat(timespec="seconds"),
        # Org-wide activity (runs and messages carry no area); decisions and insights are the area's.
        "org_activity": {
            "runs_by_status": _counts(session, AiAgentRun.status, *live_runs),
            "runs_cost_micros": int(cost or 0),
            "messages_inbound": messages.get(MessageDirection.INBOUND.value, 0),
            "messages_outbound": messages.get(MessageDirection.OUTBOUND.value, 0),
            "conversations_active": int(conversations or 0),
        },
        "decisions_by_action_type": decisions,
        "insights_by_status": _counts(
            session, WorkspaceInsight.status, WorkspaceInsight.org_id == org_id, WorkspaceInsight.area == area
        ),
    }


def _parse_items(items: list[dict[str, Any]]) -> list[InsightItem]:
    if not items:
        raise ToolFailure("items must list at least one insight")
    if len(items) > MAX_ITEMS:
        raise ToolFailure(f"at most {MAX_ITEMS} insights per call")
    try:
        parsed = [InsightItem.model_validate(item) for item in items]
    except ValidationError as exc:
        raise ToolFailure(f"invalid insight: {exc.errors()[0]['loc']} {exc.errors()[0]['msg']}") from None
    for item in parsed:
        if not is_area(item.area):
            raise ToolFailure(f"unknown area {item.area!r}; one of {', '.join(area_slugs())}")
        if not _KEY.match(item.key):
            raise ToolFailure("key must be a short lowercase slug (a-z, 0-9, _ . -) naming the finding")
    return parsed


def publish_items(
    session: Session, serde: Serde, claims: RunTokenClaims, items: list[InsightItem], now: datetime
) -> list[dict[str, Any]]:
    """Upsert each item and enqueue its ``insights`` record, in the caller's tenant transaction."""
    day = local_day(now, org_zone(session, claims.org_id))  # the org's day, as the brief dates facts
    published: list[dict[str, Any]] = []
    for item in items:
        key = insight_key(item.area, item.key)
        actions = tuple(
            SuggestedAction(
                action_type=a.action_type, label=a.label, arguments_json=json.dumps(a.arguments, sort_keys=True)
            )
            for a in item.suggested_actions
        )
        note = InsightNote(
            org_id=claims.org_id,
            key=key,
            kind=InsightKind.INSIGHT,
            area=item.area,
            title=item.title,
            body=item.body,
            day=day,
            suggested_actions=actions,
            run_id=claims.run_id,
            agent_id=claims.agent_id,
            conversation_id=claims.conversation_id,
            request_id=f"analysis:{claims.run_id}:{key}",
        )
        insight_id = publish_insight(session, serde, note)
        status = session.scalar(select(WorkspaceInsight.status).where(WorkspaceInsight.id == insight_id))
        published.append({"insight_id": str(insight_id), "insight_key": key, "status": status})
    return published


@dataclass
class AnalysisTools:
    """The two tools over the API's pool; the serde is built on first use (the tool server has no Kafka client)."""

    sessions: async_sessionmaker[AsyncSession]
    serde: Serde | None = None

    def _serde(self) -> Serde:
        if self.serde is None:
            self.serde = Serde.from_settings(KafkaSettings())
        return self.serde

    async def area_summary(self, claims: RunTokenClaims, *, area: str, days: int) -> dict[str, Any]:
        if not is_area(area):
            raise ToolFailure(f"unknown area {area!r}; one of {', '.join(area_slugs())}")
        if not 1 <= days <= MAX_DAYS:
            raise ToolFailure(f"days must be between 1 and {MAX_DAYS}")
        now = datetime.now(UTC)
        async with self.sessions() as session, async_tenant_transaction(session, claims.org_id):
            return await session.run_sync(lambda s: area_summary(s, claims.org_id, area, days, now))

    async def publish(self, claims: RunTokenClaims, *, items: list[dict[str, Any]]) -> dict[str, Any]:
        parsed = _parse_items(items)
        if claims.dry_run:
            return {"status": "not_published", "reason": "dry run", "count": len(parsed)}
        serde, now = self._serde(), datetime.now(UTC)
        async with self.sessions() as session, async_tenant_transaction(session, claims.org_id):
            await ensure_run_going(session, claims)
            published = await session.run_sync(lambda s: publish_items(s, serde, claims, parsed, now))
        return {"status": "published", "insights": published}
