"""Wake reasons on the runner's side [002]: what a ``followUp`` run knows and records of its follow-up.

The wake reason and its context ids are recorded on the run row by the store
(``ai_agent_runs.wake_reason`` / ``wake_context``) and shown in the prompt by the
**Wake context** layer (``context.WakeLayer``). What is added here:

- the **Follow-up** layer, right after Wake context: an id alone does not tell the agent
  why it promised to come back, so the follow-up's reason, its times and its extra context
  are read from ``scheduled_followups`` and shown;
- after the run, the follow-up is linked to the run it woke (``fired_run_id``), so it shows
  which run answered it. Best effort: a failure is logged.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import UTC
from typing import Final

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from services.runner.context import ContextBuilder, DraftBuilder
from services.runner.memory import insert_after
from services.runner.providers.base import ProviderAccess
from services.runner.subject import RunSubject
from switchboard.db.models import ScheduledFollowup
from switchboard.db.session import async_tenant_transaction
from switchboard.observability.logging import get_logger

log = get_logger(__name__)

LABEL: Final = "Follow-up"


class FollowupContextLayer:
    """Why a ``followUp`` run (or its recovery) was woken: the follow-up's reason, when it was
    scheduled and due."""

    name = "followup_context"

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def build(self, subject: RunSubject, draft: DraftBuilder) -> None:
        request = subject.request
        followup_id = request.wake_context.follow_up_id
        if followup_id is None:
            # Not only ``followUp``: the recovery of a follow-up's run (``recovery``) keeps the id,
            # and the run must still know what it promised (2026-12-05: it answered blind).
            return
        async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
            row = await session.scalar(
                select(ScheduledFollowup).where(
                    ScheduledFollowup.org_id == request.org_id, ScheduledFollowup.id == followup_id
                )
            )
        if row is None:
            return
        text = (
            f"This conversation's agent scheduled a follow-up on {row.created_at.astimezone(UTC):%Y-%m-%d %H:%M} "
            f"UTC, due {row.due_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC. Reason: {row.reason}"
        )
        if row.context:
            text += f"\nContext: {json.dumps(row.context, ensure_ascii=False, sort_keys=True)}"
        draft.layer(LABEL, text)


def with_followup_context(
    builders: Sequence[ContextBuilder], sessions: async_sessionmaker[AsyncSession]
) -> list[ContextBuilder]:
    """``builders`` with the Follow-up layer right after the wake context (``wake``)."""
    return insert_after(builders, "wake", FollowupContextLayer(sessions))


class FollowupLinker:
    """After a ``followUp`` run (or its recovery): ``fired_run_id`` of its follow-up, when not set yet."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions
        self._tasks: set[asyncio.Task[None]] = set()

    def after_run(self, subject: RunSubject, access: ProviderAccess | None) -> None:
        request = subject.request
        if request.wake_context.follow_up_id is None:  # a followUp run, or its recovery
            return
        task = asyncio.create_task(self.link(subject), name="followup-link")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def link(self, subject: RunSubject) -> None:
        request = subject.request
        try:
            async with self._sessions() as session, async_tenant_transaction(session, request.org_id):
                await session.execute(
                    update(ScheduledFollowup)
                    .where(
                        ScheduledFollowup.org_id == request.org_id,
                        ScheduledFollowup.id == request.wake_context.follow_up_id,
                        ScheduledFollowup.fired_run_id.is_(None),
                    )
                    .values(fired_run_id=request.run_id)
                )
        except Exception as exc:
            log.warning("follow-up not linked to its run", extra={"run_id": str(request.run_id), "error": repr(exc)})

    async def close(self) -> None:
        await asyncio.gather(*self._tasks, return_exceptions=True)
