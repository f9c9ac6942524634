"""What the dispatcher remembers per conversation, and the values decisions are made of.

One :class:`ConversationState` per conversation lives in the faust table
``conversations`` (changelog-backed, keyed by the conversation id, JSON bytes). It holds
the single active run, the dispatches waiting for the next run, the last run time per
agent (the 5 s rule) and bounded sets of handled message and run ids (idempotency).

Pure data: no broker, no database. The state machine in ``policy.py`` changes it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated, Any, Final

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from services.dispatcher import recent_ids
from switchboard.contracts import (
    ConcurrencyPolicy,
    DispatchRequested,
    InboundMessage,
    Record,
    TopicSpec,
    WakeContext,
    WakeReason,
)

# How many handled message/dispatch ids and closed run ids a conversation remembers.
# A replay only goes back to the last committed offset (about a second of events), so a
# few hundred per conversation is far more than any replay can reach.
HANDLED_MEMORY: Final = 512
CLOSED_RUN_MEMORY: Final = 64

# Namespace of the ids the dispatcher derives (run ids, decision ids): equal inputs give
# equal ids, so a decision recomputed after a crash is recognized as the same one.
DISPATCHER_NAMESPACE: Final = uuid.UUID("6f1c3f7e-4b0e-5d57-9a3e-2f4a8d1c9b60")


def derived_id(*parts: object) -> uuid.UUID:
    """A deterministic id from its parts (uuid5 in the dispatcher's namespace)."""
    return uuid.uuid5(DISPATCHER_NAMESPACE, ":".join("-" if p is None else str(p) for p in parts))


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ActiveRun(_Model):
    """The one run the dispatcher considers active in a conversation."""

    run_id: uuid.UUID
    agent_id: uuid.UUID
    version_id: uuid.UUID
    # The concurrency policy of the run's version: it decides what a message arriving
    # while this run is active does (the run is what gets steered or interrupted).
    policy: ConcurrencyPolicy
    provider: str = ""
    model: str = ""
    attempt: int = 1
    parent_run_id: uuid.UUID | None = None
    wake_reason: WakeReason
    wake_context: WakeContext
    # Every dispatch the run answers, oldest first (coalesced and steered ones included),
    # so a recovery attempt answers exactly the same messages.
    dispatches: list[DispatchRequested]
    # How many of ``dispatches`` came with the run request; the rest were steered in.
    requested_count: int = 1
    dispatched_at: datetime
    lease_expires_at: datetime
    # A runner has acknowledged the run (run_started or a heartbeat): the short lease applies.
    started: bool = False
    # The worker incarnation (PolicyConfig.incarnation) that last sent the run request; another
    # one that takes the conversation over before any acknowledgment sends it once more.
    requested_by: str = ""
    interrupt_requested: bool = False
    # Attempts that ended with their runner handing the run back at a stop (a rolling deploy, a
    # scale-down, a drain): not the run's failure, so not counted against DISPATCHER_MAX_ATTEMPTS.
    handbacks: int = 0

    @property
    def messages(self) -> tuple[InboundMessage, ...]:
        return tuple(d.message for d in self.dispatches if d.message is not None)

    @property
    def dispatch_ids(self) -> tuple[uuid.UUID, ...]:
        return tuple(d.event_id for d in self.dispatches)


class PendingDispatch(_Model):
    """A dispatch waiting for the next run: queued behind the active run, or deferred by a limit."""

    dispatch: DispatchRequested
    queued_at: datetime
    # True once a rate_limited decision was recorded for it (recorded once, not per retry).
    deferral_reported: bool = False


def _packed_keys(value: Any) -> Any:
    """States written before 2026-12-02 hold the dedupe keys as a JSON list: pack them on read.
    (A field validator, not a model one: a model validator would make every parse build the
    whole document as Python objects first.)"""
    if isinstance(value, list):
        return recent_ids.pack((recent_ids.key_entry(k) for k in value), HANDLED_MEMORY)
    return value


def _packed_run_ids(value: Any) -> Any:
    if isinstance(value, list):
        return recent_ids.pack((recent_ids.uuid_entry(r) for r in value), CLOSED_RUN_MEMORY)
    return value


class ConversationState(_Model):
    """Everything the dispatcher keeps about one conversation (the table's value)."""

    org_id: uuid.UUID
    conversation_id: uuid.UUID
    active: ActiveRun | None = None
    pending: list[PendingDispatch] = Field(default_factory=list)
    # Earliest time the pending dispatches may start (a rate limit deferred them).
    not_before: datetime | None = None
    # The interrupted run whose messages the next run re-answers (its parent in the lineage).
    continues_run_id: uuid.UUID | None = None
    # Agent id -> when the dispatcher last started a run of it here (one reply per 5 s).
    last_run_at: dict[str, datetime] = Field(default_factory=dict)
    # Dedupe keys of dispatches already seen (message id, or event id without a message), as
    # 16-hex-digit digests, oldest first, in one string (``recent_ids.py``: a long
    # conversation's state was 23 KB of JSON, parsed and rewritten on every event).
    handled: Annotated[str, BeforeValidator(_packed_keys)] = ""
    # Runs that ended (completed, recovered as a new attempt, lost), their ids' 32 hex digits,
    # oldest first: late events of these are ignored.
    closed_runs: Annotated[str, BeforeValidator(_packed_run_ids)] = ""
    # Humans own the conversation (a run ended in handoff): every dispatch gets a conv_busy
    # decision until one with wake reason ``assignment`` (the API's handback) clears it.
    human_owned: bool = False
    # When the last handback (an ``assignment`` resuming no run) was handled: a handoff outcome
    # of a run dispatched before it is older news and leaves the conversation to the agents.
    handed_back_at: datetime | None = None
    updated_at: datetime

    @classmethod
    def empty(cls, org_id: uuid.UUID, conversation_id: uuid.UUID, now: datetime) -> ConversationState:
        return cls(org_id=org_id, conversation_id=conversation_id, updated_at=now)

    @classmethod
    def from_bytes(cls, raw: bytes) -> ConversationState:
        return cls.model_validate_json(raw)

    def to_bytes(self) -> bytes:
        return self.model_dump_json().encode()

    # --- idempotency -------------------------------------------------------------

    def has_seen(self, key: str) -> bool:
        return recent_ids.contains(self.handled, recent_ids.key_entry(key))

    def remember(self, key: str) -> None:
        self.handled = recent_ids.append(self.handled, recent_ids.key_entry(key), HANDLED_MEMORY)

    def is_closed(self, run_id: uuid.UUID) -> bool:
        return recent_ids.contains(self.closed_runs, run_id.hex)

    def close_run(self, run_id: uuid.UUID) -> None:
        if not self.is_closed(run_id):
            self.closed_runs = recent_ids.append(self.closed_runs, run_id.hex, CLOSED_RUN_MEMORY)

    @property
    def idle(self) -> bool:
        """Nothing running and nothing waiting: only idempotency memory is left."""
        return self.active is None and not self.pending


def dedupe_key(dispatch: DispatchRequested) -> str:
    """What makes two dispatch records the same request: the message, else the event."""
    if dispatch.message is not None:
        return f"m:{dispatch.message.message_id}"
    return f"d:{dispatch.event_id}"


@dataclass(frozen=True, slots=True)
class Emit:
    """A record to produce. ``before_commit`` records (decisions) go out with the state
    change and are acknowledged before the run requests (docs/dispatcher.md)."""

    topic: TopicSpec[Any]
    record: Record


@dataclass(slots=True)
class Transition:
    """The result of applying events to one conversation: its new state and what to emit."""

    state: ConversationState | None
    decisions: list[Any] = field(default_factory=list)  # DispatchDecided records
    outputs: list[Emit] = field(default_factory=list)  # run_requested, steering, run_completed
    # The first decision about each new (non-dry) dispatch: what the no-match rate counts.
    arrivals: list[Any] = field(default_factory=list)  # DispatchOutcome values

    def extend(self, other: Transition) -> None:
        self.state = other.state
        self.decisions.extend(other.decisions)
        self.outputs.extend(other.outputs)
        self.arrivals.extend(other.arrivals)


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


def messages_of(dispatches: Iterable[DispatchRequested]) -> tuple[InboundMessage, ...]:
    return tuple(d.message for d in dispatches if d.message is not None)
