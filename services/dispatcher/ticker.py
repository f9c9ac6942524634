"""The timer side: know when each local conversation is next due, and wake it with a tick.

The processor tells the ticker each conversation's next due time when it writes its
state (``recovery.next_due``: a lease expiry, a deferred dispatch's not-before time, the
end of an idle state's life). Every ``DISPATCHER_TICK_INTERVAL_S`` the ticker sends a
``dispatcher_ticks`` record, keyed by the conversation, for each one that is due; the
tick comes back through the stream on the conversation's own partition, so every state
change still happens inside the stream (the changelog is written from one place).

The ticker never writes state. After a rebalance, the conversations recovered from the
changelog are rescanned once (``rebuild``); a run another worker dispatched and no runner
acknowledged is due at once, so that its request is sent again (``policy.on_tick``). A tick
that changed nothing (it raced an event) is re-sent after a few intervals until the
conversation moves on.
"""

from __future__ import annotations

import asyncio
import heapq
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from services.dispatcher import metrics, recovery
from services.dispatcher.state import ConversationState
from switchboard.contracts import DispatcherTick, Topics
from switchboard.observability.logging import get_logger

log = get_logger(__name__)

# A tick still unanswered after this many intervals is sent again.
RESEND_INTERVALS = 5


class Ticker:
    def __init__(
        self,
        *,
        emitter: Any,
        worker_id: str,
        interval_s: float,
        state_ttl_s: float,
        clock: Callable[[], datetime],
        incarnation: str = "",
    ) -> None:
        self._emitter = emitter
        self._worker_id = worker_id
        self._incarnation = incarnation
        self._interval_s = interval_s
        self._state_ttl_s = state_ttl_s
        self._clock = clock
        self._due: dict[bytes, tuple[datetime, uuid.UUID]] = {}
        self._heap: list[tuple[datetime, bytes]] = []
        self._sent: dict[bytes, float] = {}

    def __len__(self) -> int:
        return len(self._due)

    def update(self, key: bytes, org_id: uuid.UUID, due: datetime | None) -> None:
        """The conversation's state changed: remember when it is next due (None: forget it)."""
        self._sent.pop(key, None)
        if due is None:
            self._due.pop(key, None)
            return
        self._due[key] = (due, org_id)
        heapq.heappush(self._heap, (due, key))

    def rebuild(self, items: Iterable[tuple[bytes, bytes]]) -> int:
        """Recompute every due time from the local table (after recovery from the changelog)."""
        self._due.clear()
        self._heap.clear()
        self._sent.clear()
        for key, raw in items:
            try:
                state = ConversationState.from_bytes(raw)
            except ValueError:
                log.error("unreadable conversation state skipped", extra={"key": key.decode(errors="replace")})
                continue
            self.update(key, state.org_id, recovery.next_due(state, self._state_ttl_s, self._incarnation))
        metrics.CONVERSATIONS.labels("held").set(len(self._due))
        return len(self._due)

    def due_now(self) -> list[tuple[bytes, uuid.UUID, datetime]]:
        """Conversations due at this moment that have no recent tick in flight."""
        now = self._clock()
        mono = time.monotonic()
        resend_after = self._interval_s * RESEND_INTERVALS
        found: list[tuple[bytes, uuid.UUID, datetime]] = []
        still_due: dict[bytes, datetime] = {}
        while self._heap and self._heap[0][0] <= now:
            due, key = heapq.heappop(self._heap)
            current = self._due.get(key)
            if current is None or current[0] != due or key in still_due:
                continue  # superseded by a later update, or a duplicate entry
            # It stays due until its state changes: kept, so a lost tick is sent again.
            still_due[key] = due
            sent = self._sent.get(key)
            if sent is None or mono - sent >= resend_after:
                self._sent[key] = mono
                found.append((key, current[1], due))
        for key, due in still_due.items():
            heapq.heappush(self._heap, (due, key))
        return found

    async def tick(self) -> int:
        """Send a tick to every due conversation; returns how many were sent."""
        due = self.due_now()
        if not due:
            return 0
        now = self._clock()
        futures = [
            await self._emitter.enqueue(
                Topics.DISPATCHER_TICKS,
                DispatcherTick(
                    org_id=org_id,
                    conversation_id=uuid.UUID(key.decode()),
                    due_at=due_at,
                    worker_id=self._worker_id,
                    occurred_at=now,
                ),
            )
            for key, org_id, due_at in due
        ]
        await asyncio.gather(*futures)
        metrics.TICKS_SENT.inc(len(due))
        return len(due)
