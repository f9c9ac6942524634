"""The daily analysis fan-out: once per org and org-local day, wake each analysis agent.

Where it runs (docs/analysis.md): in every API process, next to the follow-up scheduler,
for the same reason — what it produces is outbox rows. No leader is needed.

**Exactly once per org and day.** Per org, one transaction: the org-local day is computed
from ``organizations.time_zone``; once the local hour reaches ``local_hour`` the scheduler
inserts ``analysis_claims (org_id, day)`` with ``ON CONFLICT DO NOTHING`` and, only when
its insert created the row, puts one ``dispatch_requested`` per analysis agent in the
outbox. A concurrent instance blocks on the same key until the first commits, then
inserts nothing; the claim and the events commit together or not at all.

An org's **analysis agents** are its published, unarchived agents whose published version
grants ``insights_publish``. Each is woken with reason ``pipelineStep`` (the analysis is a
pipeline step; ``pipeline_run_id`` is a stable id of the org and day) on the org's internal
analysis conversation, naming the agent as the target (not the version: an agent paused
or unpublished before the dispatcher sees the event must not run).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime

from sqlalchemy import select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session

from services.api.analysis.conversation import ensure_analysis_conversation
from services.api.conversations.wake import wake_dispatch
from switchboard.contracts import Serde, Topics, WakeContext, WakeReason
from switchboard.db.daily_brief import org_zone
from switchboard.db.models import AiAgent, AiAgentVersion, AnalysisClaim
from switchboard.db.outbox import enqueue_record
from switchboard.db.session import async_tenant_transaction
from switchboard.observability.logging import get_logger
from switchboard.tool_catalog import INSIGHTS_PUBLISH

log = get_logger(__name__)

_PIPELINE_NAMESPACE = uuid.UUID("5b0c6a52-3f7e-4d55-9a53-5f1d1f3a0c16")


@dataclass(frozen=True, slots=True)
class FanOut:
    """One org's claimed day and the dispatches it produced."""

    org_id: uuid.UUID
    day: date
    dispatch_ids: tuple[uuid.UUID, ...]


def pipeline_run_id(org_id: uuid.UUID, day: date) -> uuid.UUID:
    """A stable id of the org's analysis of ``day`` (the wake context of every run of it)."""
    return uuid.uuid5(_PIPELINE_NAMESPACE, f"{org_id}:{day.isoformat()}")


def analysis_agents(session: Session, org_id: uuid.UUID) -> list[tuple[uuid.UUID, uuid.UUID | None]]:
    """(agent id, its published version's channel session id) of the org's analysis agents, oldest first."""
    rows = session.execute(
        select(AiAgent.id, AiAgentVersion.channel_session_id)
        .join(AiAgentVersion, AiAgentVersion.id == AiAgent.published_version_id)
        .where(
            AiAgent.org_id == org_id,
            AiAgent.archived_at.is_(None),
            AiAgentVersion.tool_ids.contains([INSIGHTS_PUBLISH]),
        )
        .order_by(AiAgent.created_at, AiAgent.id)
    ).all()
    return [(r[0], r[1]) for r in rows]


def due_orgs(db: Session, now: datetime, local_hour: int, limit: int) -> list[uuid.UUID]:
    """Orgs whose analysis of their current local day is due and unclaimed (SECURITY DEFINER lookup, ids only)."""
    rows = db.execute(
        text("SELECT org_id FROM list_due_analyses(:now, :hour, :limit)"),
        {"now": now, "hour": local_hour, "limit": limit},
    )
    return list(rows.scalars())


def fan_out_org(session: Session, serde: Serde, org_id: uuid.UUID, now: datetime, local_hour: int) -> FanOut | None:
    """Claim the org's current local day and dispatch its analysis agents, in the caller's tenant transaction."""
    local = now.astimezone(org_zone(session, org_id))  # an unknown zone counts as UTC, as in the brief
    if local.hour < local_hour:
        return None
    day = local.date()
    if session.get(AnalysisClaim, (org_id, day)) is not None:
        return None  # the common case on every later poll of the day: no write
    claimed = session.scalar(
        insert(AnalysisClaim)
        .values(org_id=org_id, day=day)
        .on_conflict_do_nothing(index_elements=[AnalysisClaim.org_id, AnalysisClaim.day])
        .returning(AnalysisClaim.day)
    )
    if claimed is None:
        return None  # another instance claimed it (and dispatched, in its own transaction)
    agents = analysis_agents(session, org_id)
    conversation = ensure_analysis_conversation(session, org_id, agents[0][1]) if agents else None
    dispatched: list[uuid.UUID] = []
    if conversation is not None:
        context = WakeContext(pipeline_run_id=pipeline_run_id(org_id, day))
        for agent_id, _ in agents:
            record = wake_dispatch(
                conversation,
                WakeReason.PIPELINE_STEP,
                context,
                request_id=f"analysis:{day.isoformat()}:{agent_id}",
                target_agent_id=agent_id,
            )  # no target version: the dispatcher runs the agent only if still published, at its current version
            enqueue_record(session, Topics.DISPATCH_REQUESTED, record, serde=serde)
            dispatched.append(record.event_id)
    session.execute(
        update(AnalysisClaim)
        .where(AnalysisClaim.org_id == org_id, AnalysisClaim.day == day)
        .values(conversation_id=conversation.id if conversation else None, agents_dispatched=len(dispatched))
    )
    return FanOut(org_id, day, tuple(dispatched))


class AnalysisScheduler:
    """Checks every ``poll_s`` which orgs reached their local analysis hour (``start()`` / ``stop()``)."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        serde: Serde,
        *,
        local_hour: int = 6,
        poll_s: float = 60.0,
        batch: int = 200,
    ) -> None:
        self._batch = batch
        self._sessions = sessions
        self._serde = serde
        self._local_hour = local_hour
        self._poll_s = poll_s
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def tick(self, now: datetime | None = None, org_ids: list[uuid.UUID] | None = None) -> list[FanOut]:
        """One pass: each org whose local day is due and unclaimed (default: as ``list_due_analyses`` finds
        them; tests may name the orgs), fanned out. The claim is re-checked in the org's transaction."""
        moment = now or datetime.now(UTC)
        if org_ids is None:
            async with self._sessions() as session, session.begin():
                org_ids = await session.run_sync(lambda s: due_orgs(s, moment, self._local_hour, self._batch))
        done: list[FanOut] = []
        for org_id in org_ids:
            if self._stop.is_set():
                break  # shutting down: the rest waits for the next instance's pass
            try:
                fanned = await self._fan_out(org_id, moment)
            except Exception as exc:
                # One org's failure (its transaction rolled back, nothing claimed) is that org's: it is
                # tried again next pass, and the orgs after it in this pass still get their analysis.
                log.warning(
                    "analysis fan-out failed for an org",
                    extra={"organization_id": str(org_id), "error": type(exc).__name__},
                    exc_info=True,
                )
                continue
            if fanned is not None:
                done.append(fanned)
                log.info(
                    "analysis fanned out",
                    extra={
                        "organization_id": str(org_id),
                        "day": fanned.day.isoformat(),
                        "runs": len(fanned.dispatch_ids),
                    },
                )
        return done

    async def _fan_out(self, org_id: uuid.UUID, moment: datetime) -> FanOut | None:
        """One org's claim and outbox rows: one transaction."""
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            return await session.run_sync(lambda s: fan_out_org(s, self._serde, org_id, moment, self._local_hour))

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.tick()
            except Exception as exc:  # the database blinked: try again next poll
                log.warning("analysis scheduler pass failed", extra={"error": type(exc).__name__}, exc_info=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._poll_s)

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(self._stop), name="analysis-scheduler")

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
