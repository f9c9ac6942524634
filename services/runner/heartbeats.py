"""Heartbeats of in-flight runs: the lease the dispatcher watches (docs/dispatcher.md).

Every ``RUNNER_HEARTBEAT_S`` (10 s) the runner sends one ``run_heartbeats``
record per run it holds — from the moment it took the run, so a run waiting
for its conversation to be free keeps its lease too — and refreshes
``ai_agent_runs.heartbeat_at`` (one statement per org), which is what another
runner reads to decide that an active run was abandoned. Heartbeats are
best-effort: a lost one only shortens the lease, which the next one renews.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from services.runner.store import RunStore
from switchboard.contracts import RunHeartbeat, RunRequested, Topics
from switchboard.kafka.producer import RecordProducer
from switchboard.observability.logging import get_logger

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Beat:
    request: RunRequested
    status: str
    steps: int


def heartbeat_record(beat: Beat, *, runner_id: str) -> RunHeartbeat:
    request = beat.request
    return RunHeartbeat(
        org_id=request.org_id,
        request_id=request.request_id,
        conversation_id=request.conversation_id,
        run_id=request.run_id,
        agent_id=request.agent_id,
        attempt=request.attempt,
        runner_id=runner_id,
        steps=beat.steps,
        dry_run=request.dry_run,
    )


class Heartbeater:
    def __init__(
        self,
        *,
        producer: RecordProducer | None,
        store: RunStore,
        runner_id: str,
        interval_s: float,
        beats: Callable[[], Iterable[Beat]],
    ) -> None:
        self._producer = producer
        self._store = store
        self._runner_id = runner_id
        self._interval_s = interval_s
        self._beats = beats

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self._interval_s)
            if not stop.is_set():
                await self.beat_once()

    async def beat_once(self) -> None:
        beats = list(self._beats())
        if not beats:
            return
        if self._producer is not None:
            for beat in beats:
                try:
                    await self._producer.enqueue(
                        Topics.RUN_HEARTBEATS, heartbeat_record(beat, runner_id=self._runner_id)
                    )
                except Exception as exc:
                    log.warning(
                        "heartbeat not sent", extra={"run_id": str(beat.request.run_id), "error": type(exc).__name__}
                    )
        by_org: dict[uuid.UUID, list[uuid.UUID]] = defaultdict(list)
        for beat in beats:
            by_org[beat.request.org_id].append(beat.request.run_id)
        for org_id, run_ids in by_org.items():
            try:
                await self._store.heartbeat(org_id, run_ids)
            except Exception as exc:
                log.warning("heartbeat not stored", extra={"org_id": str(org_id), "error": type(exc).__name__})
