"""Which agent answers a dispatch [004 §5.2 steps 1-3, §5.3]: pure functions.

Candidates are the published, unarchived, unpaused agents of the dispatch's org bound
to its channel session (``AgentIndex``), already in dispatch order (priority desc, then
created_at asc). Each candidate's trigger config filters the dispatch:

- event types: a user message is the ``message`` event (``message.any`` matches it
  too); other wake reasons are their snake_case name (``follow_up``, ``assignment``...);
- ``ignore_groups`` / ``ignore_own``: group chats and the business's own messages (an
  owner's run command from the business phone — ``/goal``, ``/plan``, ``/loop``,
  ``/skill:`` — is not "own" here: it is addressed to the agent, and it is the only own
  message ingest dispatches);
- ``keyword_regex``: searched case-insensitively in the message text, each search bounded
  by a timeout (``switchboard.keyword_patterns``: a tenant's pattern cannot stall the
  worker; one that timed out is disabled in this process and rejects as
  ``keyword_regex_timeout``); patterns are compiled once in a bounded LRU cache, and a
  pattern that does not compile, or whose repeat counts exceed ``MAX_REPEAT`` (checked before
  compiling; the API refuses both at save time), rejects rather than crashes;
- business hours: the message's reception time in the zone of the business hours
  (the org's zone, copied into the trigger by the API); a window whose end is at or
  before its start, or past 24:00, continues after midnight into the next day.

The first candidate that passes wins; none → ``no_match``, with the reason of each
rejection kept for the decision record. A dispatch that names a target agent skips
the ranking and the trigger filters: someone chose that agent explicitly.

Classification filters (``trigger_config.classification``) need labels a run computes, so
they are not checked here: the runner checks them and, when unmet, re-dispatches the same
messages with its agent in ``excluded_agent_ids``; an excluded agent is never chosen
(``excluded``), so each agent is tried at most once and the chain ends in ``no_match``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from services.dispatcher.agents import AgentIndex
from switchboard.contracts import (
    AgentVersionSnapshot,
    BusinessHours,
    ConcurrencyPolicy,
    DispatchRequested,
    TriggerConfig,
    WakeReason,
    Weekday,
)
from switchboard.keyword_patterns import KeywordPatternTimeout, cached_keyword
from switchboard.slash_commands import is_run_command
from switchboard.time_zones import load_time_zone

MESSAGE_EVENT: Final = "message"
ANY_MESSAGE_EVENT: Final = "message.any"
# Longest text a keyword pattern is searched in: bounds the cost of a pathological pattern.
KEYWORD_TEXT_LIMIT: Final = 8_192
MINUTES_PER_DAY: Final = 24 * 60

_WAKE_EVENTS: Final = {
    WakeReason.USER_MESSAGE: MESSAGE_EVENT,
    WakeReason.ASSIGNMENT: "assignment",
    WakeReason.PIPELINE_STEP: "pipeline_step",
    WakeReason.CHILD_COMPLETED: "child_completed",
    WakeReason.FOLLOW_UP: "follow_up",
    WakeReason.RECOVERY: "recovery",
}
_WEEKDAYS: Final = (
    Weekday.MONDAY,
    Weekday.TUESDAY,
    Weekday.WEDNESDAY,
    Weekday.THURSDAY,
    Weekday.FRIDAY,
    Weekday.SATURDAY,
    Weekday.SUNDAY,
)


@dataclass(frozen=True, slots=True)
class Choice:
    """The agent version chosen for a dispatch, with what the state machine needs of it."""

    agent_id: uuid.UUID
    version_id: uuid.UUID
    policy: ConcurrencyPolicy = ConcurrencyPolicy.ENQUEUE
    provider: str = ""
    model: str = ""

    @classmethod
    def of(cls, snapshot: AgentVersionSnapshot) -> Choice:
        return cls(
            snapshot.agent_id, snapshot.version_id, snapshot.concurrency_policy, snapshot.provider, snapshot.model
        )


@dataclass(frozen=True, slots=True)
class Selection:
    """The outcome of selection: the choice (or None) and why each candidate was or was not it."""

    choice: Choice | None
    considered: tuple[tuple[uuid.UUID, str], ...] = ()
    reason: str | None = None


def event_type(dispatch: DispatchRequested) -> str:
    """The trigger event a dispatch is (what ``TriggerConfig.event_types`` lists)."""
    return _WAKE_EVENTS[dispatch.wake_reason]


def in_business_hours(hours: BusinessHours, moment: datetime) -> bool:
    """True when ``moment`` falls in one of the weekly windows, in the hours' own time zone."""
    zone = load_time_zone(hours.time_zone)
    if zone is None:
        return False
    local = moment.astimezone(zone)
    today = _WEEKDAYS[local.weekday()]
    yesterday = _WEEKDAYS[(local.weekday() - 1) % 7]
    minute = local.hour * 60 + local.minute
    for window in hours.windows:
        start, end = window.start_minute, window.end_minute
        crosses = end <= start or end > MINUTES_PER_DAY
        if window.weekday is today:
            if start <= minute < (MINUTES_PER_DAY if crosses else end):
                return True
        elif window.weekday is yesterday and crosses:
            spill = end - MINUTES_PER_DAY if end > MINUTES_PER_DAY else end
            if minute < spill:
                return True
    return False


def trigger_rejection(trigger: TriggerConfig, dispatch: DispatchRequested) -> str | None:
    """Why ``trigger`` does not fire for ``dispatch``; None when it fires."""
    kind = event_type(dispatch)
    accepted = set(trigger.event_types)
    if kind not in accepted and not (kind == MESSAGE_EVENT and ANY_MESSAGE_EVENT in accepted):
        return f"event_type:{kind}"
    message = dispatch.message
    if message is not None:
        if trigger.ignore_groups and message.is_group:
            return "ignore_groups"
        if trigger.ignore_own and message.from_me and not is_run_command(message.text):
            # The owner's /goal, /plan, /loop or /skill: from the business phone is addressed
            # to the agent, not to the customer: ingest dispatches exactly those own messages.
            return "ignore_own"
        if trigger.keyword_regex:
            pattern = cached_keyword(trigger.keyword_regex)
            if pattern is None:
                return "keyword_regex_invalid"
            try:
                if not pattern.matches(message.text[:KEYWORD_TEXT_LIMIT]):
                    return "keyword_regex"
            except KeywordPatternTimeout:
                return "keyword_regex_timeout"
    if trigger.business_hours is not None:
        moment = message.received_at if message is not None else dispatch.occurred_at
        if not in_business_hours(trigger.business_hours, moment):
            return "business_hours"
    return None


def rank(candidates: Sequence[AgentVersionSnapshot], dispatch: DispatchRequested) -> Selection:
    """The first candidate (already in dispatch order) whose trigger fires."""
    considered: list[tuple[uuid.UUID, str]] = []
    excluded = set(dispatch.excluded_agent_ids)
    for snapshot in candidates:
        rejection = "excluded" if snapshot.agent_id in excluded else trigger_rejection(snapshot.trigger, dispatch)
        if rejection is None:
            considered.append((snapshot.agent_id, "chosen"))
            return Selection(Choice.of(snapshot), tuple(considered))
        considered.append((snapshot.agent_id, rejection))
    reason = "no published agent on this channel session" if not considered else "no trigger matched"
    return Selection(None, tuple(considered), reason)


def select(index: AgentIndex, dispatch: DispatchRequested) -> Selection:
    """Choose the agent for ``dispatch`` from the published index."""
    if dispatch.target_agent_id is not None:
        snapshot = index.agent(dispatch.org_id, dispatch.target_agent_id)
        if dispatch.target_version_id is not None:
            if snapshot is not None and snapshot.version_id == dispatch.target_version_id:
                return Selection(Choice.of(snapshot), ((snapshot.agent_id, "target"),))
            if snapshot is None and not dispatch.dry_run:
                # A /goal segment or an approval resume names the version that began the work;
                # an agent paused (by its owner or its budget) or archived since does no more.
                return Selection(None, ((dispatch.target_agent_id, "not_published"),), "target agent is not published")
            # A dry-run test of a draft needs no published snapshot; a republished agent's
            # named version finishes the work it began.
            return Selection(Choice(dispatch.target_agent_id, dispatch.target_version_id), ())
        if snapshot is None:
            return Selection(None, ((dispatch.target_agent_id, "not_published"),), "target agent is not published")
        return Selection(Choice.of(snapshot), ((snapshot.agent_id, "target"),))
    return rank(index.candidates(dispatch.org_id, dispatch.channel_session_id), dispatch)
