"""The supervisor: takes runs from ``run_requested`` without ever blocking the consumer.

**Consumption is decoupled from execution.** The consumer's handler
(:meth:`RunSupervisor.accept`) only registers the run and starts an asyncio
task for it, then returns; the consumer commits the offset right after. A
run lasting minutes therefore never holds the poll loop (Kafka's
``max.poll.interval.ms`` is 5 minutes): the loop keeps polling, heartbeating
the group and committing. Runs are I/O bound, so one process holds hundreds.

**Back-pressure.** The supervisor is the consumer's ``FlowControl``: at
``RUNNER_MAX_IN_FLIGHT`` runs the consumer pauses its partitions (and keeps
polling, fetching nothing) until a run finishes; a fetch never returns more
records than there is room for.

**What is committed when, and why a crash loses nothing.** The offset of a
``run_requested`` is committed once its run was accepted in memory — before
the run row exists. If the process dies after that, the run is lost *here*
but not in the system: the dispatcher holds the conversation's active run
with a heartbeat lease, our heartbeats stop, the lease expires and the
dispatcher re-dispatches the same messages as attempt + 1 with the lost run
as parent (docs/dispatcher.md). The new attempt closes the parent's row as
``processLost`` if it was left active. Committing only after a run finished
would instead redeliver every in-flight run of the partition on a restart,
including finished ones, and tie offsets to the slowest run. A redelivered
record (a rebalance before the commit) is harmless: its run id is already in
memory or already has a row, and it is skipped.

**Graceful shutdown.** SIGTERM stops the consumer (it commits and leaves the
group), then in-flight runs get ``RUNNER_SHUTDOWN_GRACE_S`` to finish; runs
still going are *handed back*: cancelled, their row closed as lost, no
``run_completed`` — the lease recovers them on another runner.
"""

from __future__ import annotations

import asyncio
import uuid

from services.runner.execution import RunExecutor, RunHandle
from services.runner.heartbeats import Beat
from services.runner.metrics import RUNS_IN_FLIGHT
from services.runner.steering import RunSteering, SteeringRouter
from switchboard.contracts import RunRequested
from switchboard.kafka.consumer import Inbound
from switchboard.kafka.errors import PermanentRecordError
from switchboard.observability.logging import get_logger

log = get_logger(__name__)


class RunSupervisor:
    def __init__(self, executor: RunExecutor, *, max_in_flight: int) -> None:
        self._executor = executor
        self._max_in_flight = max_in_flight
        self._runs: dict[uuid.UUID, RunHandle] = {}
        self._freed = asyncio.Event()
        self.router = SteeringRouter(self.inbox)

    # ------------------------------------------------------------------ FlowControl

    def room(self) -> int:
        return self._max_in_flight - len(self._runs)

    async def wait_for_room(self, timeout_s: float) -> None:
        if self.room() > 0:
            return
        self._freed.clear()
        try:
            await asyncio.wait_for(self._freed.wait(), timeout=timeout_s)
        except TimeoutError:
            return

    # ------------------------------------------------------------------ the consumer's handler

    async def accept(self, inbound: Inbound) -> None:
        request = inbound.value
        if not isinstance(request, RunRequested):
            raise PermanentRecordError("wrong_record_type", f"expected RunRequested, got {type(request).__name__}")
        self.start(request)

    def start(self, request: RunRequested) -> RunHandle | None:
        """Start a run in the background (the handler and tests call this); None if already held."""
        if request.run_id in self._runs:
            return None
        self._supersede(request)
        handle = RunHandle(request=request)
        self.router.adopt(request.run_id, handle.steering)
        self._runs[request.run_id] = handle
        RUNS_IN_FLIGHT.set(len(self._runs))
        handle.task = asyncio.create_task(self._run(handle), name=f"run-{request.run_id}")
        return handle

    def _supersede(self, request: RunRequested) -> None:
        """A recovery attempt whose parent still runs *here* (its lease expired while partitions
        moved, so the dispatcher re-dispatched it): the dispatcher follows the newer attempt, so the
        parent stops at its current await and is closed without an announcement."""
        parent = self._runs.get(request.parent_run_id) if request.parent_run_id else None
        if parent is None or parent.task is None or parent.task.done():
            return
        log.warning(
            "run superseded by a newer attempt, stopping it",
            extra={"run_id": str(parent.request.run_id), "new_run_id": str(request.run_id)},
        )
        parent.superseded = parent.handing_back = True
        parent.task.cancel()

    async def _run(self, handle: RunHandle) -> None:
        try:
            await self._executor.execute(handle)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error(
                "run task failed",
                extra={"run_id": str(handle.request.run_id), "error": type(exc).__name__},
                exc_info=True,
            )
        finally:
            self._runs.pop(handle.request.run_id, None)
            RUNS_IN_FLIGHT.set(len(self._runs))
            self._freed.set()

    # ------------------------------------------------------------------ views

    def inbox(self, run_id: uuid.UUID) -> RunSteering | None:
        handle = self._runs.get(run_id)
        return handle.steering if handle else None

    def beats(self) -> list[Beat]:
        return [
            Beat(request=h.request, status=h.status, steps=h.loop.steps if h.loop else 0) for h in self._runs.values()
        ]

    @property
    def in_flight(self) -> int:
        return len(self._runs)

    # ------------------------------------------------------------------ shutdown

    async def shutdown(self, grace_s: float) -> None:
        """Let in-flight runs finish for ``grace_s``, then hand the rest back."""
        tasks = [h.task for h in self._runs.values() if h.task is not None]
        if not tasks:
            return
        log.info("waiting for in-flight runs", extra={"runs": len(tasks), "grace_s": grace_s})
        _, pending = await asyncio.wait(tasks, timeout=grace_s)
        if not pending:
            return
        log.warning("handing back in-flight runs", extra={"runs": len(pending)})
        for handle in list(self._runs.values()):
            if handle.task is not None and not handle.task.done():
                handle.handing_back = True
                handle.task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
