"""Selection [004 §5.2 steps 1-3, §5.3]: one table of cases, then the edges."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest

from services.dispatcher.agents import AgentIndex
from services.dispatcher.selection import (
    in_business_hours,
    select,
    trigger_rejection,
)
from switchboard.contracts import (
    AgentVersionSnapshot,
    ConcurrencyPolicy,
    DispatchRequested,
    PublishedChange,
    TriggerConfig,
    WakeReason,
)
from switchboard.keyword_patterns import CACHE_SIZE as KEYWORD_CACHE_SIZE
from switchboard.keyword_patterns import SEARCH_TIMEOUT_S, cached_keyword
from tests.unit.dispatcher.builders import (
    ORG,
    OTHER_ORG,
    OTHER_SESSION,
    T0,
    agent_id,
    business_hours,
    dispatch,
    index_of,
    published,
    snapshot,
)

SAO_PAULO_WEEKDAYS = business_hours(
    "America/Sao_Paulo", *((day, 9 * 60, 18 * 60) for day in ("monday", "tuesday", "wednesday", "thursday", "friday"))
)
# Friday 22:00 to Saturday 02:00 in Sao Paulo, written the two ways a window can cross midnight.
LATE_FRIDAY_WRAPPED = business_hours("America/Sao_Paulo", ("friday", 22 * 60, 2 * 60))
LATE_FRIDAY_PAST_24 = business_hours("America/Sao_Paulo", ("friday", 22 * 60, 26 * 60))
FRIDAY = T0 + timedelta(days=4)  # Friday 12:00 UTC = 09:00 in Sao Paulo


def sp(day: datetime, hour: int, minute: int = 0) -> datetime:
    """``day``'s date at hour:minute Sao Paulo time (UTC-3, no DST in 2026), as UTC."""
    return day.replace(hour=0, minute=0) + timedelta(hours=hour + 3, minutes=minute)


@dataclass(frozen=True)
class Case:
    name: str
    agents: tuple[AgentVersionSnapshot, ...]
    request: DispatchRequested
    chosen: int | None  # the agent number expected, None for no_match
    rejections: dict[int, str] = field(default_factory=dict)


def trig(**kw: object) -> TriggerConfig:
    return TriggerConfig(event_types=kw.pop("event_types", ("message",)), **kw)  # type: ignore[arg-type]


CASES = [
    Case("higher priority wins", (snapshot(1, priority=5), snapshot(2, priority=10)), dispatch(), 2),
    Case(
        "priority tie: oldest agent wins",
        (snapshot(1, created_at=T0 - timedelta(days=1)), snapshot(2, created_at=T0 - timedelta(days=2))),
        dispatch(),
        2,
    ),
    Case("full tie: lowest agent id wins", (snapshot(2), snapshot(1)), dispatch(), 1),
    Case(
        "priority beats age",
        (snapshot(1, priority=1, created_at=T0 - timedelta(days=900)), snapshot(2, priority=2)),
        dispatch(),
        2,
    ),
    Case(
        "higher priority rejected by its trigger: next one",
        (snapshot(1, priority=9, trigger=trig(keyword_regex="boleto")), snapshot(2, priority=1)),
        dispatch("quero agendar"),
        2,
        {1: "keyword_regex"},
    ),
    Case("no agent at all", (), dispatch(), None),
    Case(
        "event type: message.any takes a message",
        (snapshot(1, trigger=trig(event_types=("message.any",))),),
        dispatch(),
        1,
    ),
    Case(
        "event type: a follow-up wake is not a message",
        (snapshot(1),),
        dispatch(wake=WakeReason.FOLLOW_UP),
        None,
        {1: "event_type:follow_up"},
    ),
    Case(
        "event type: follow_up listed",
        (snapshot(1, trigger=trig(event_types=("follow_up",))),),
        dispatch(wake=WakeReason.FOLLOW_UP),
        1,
    ),
    Case("groups ignored by default", (snapshot(1),), dispatch(is_group=True), None, {1: "ignore_groups"}),
    Case("groups allowed", (snapshot(1, trigger=trig(ignore_groups=False)),), dispatch(is_group=True), 1),
    Case("own messages ignored by default", (snapshot(1),), dispatch(from_me=True), None, {1: "ignore_own"}),
    Case("own messages allowed", (snapshot(1, trigger=trig(ignore_own=False)),), dispatch(from_me=True), 1),
    Case(
        "the owner's /goal from the business phone is not ignored as own",
        (snapshot(1),),
        dispatch("/goal follow up every lead --budget 2", from_me=True),
        1,
    ),
    Case("the owner's /plan and /skill: too", (snapshot(1),), dispatch("/skill:pricing table", from_me=True), 1),
    Case(
        "an own malformed command is still own",
        (snapshot(1),),
        dispatch("/goal --budget abc", from_me=True),
        None,
        {1: "ignore_own"},
    ),
    Case(
        "an own /todo is not a run command",
        (snapshot(1),),
        dispatch("/todo call back", from_me=True),
        None,
        {1: "ignore_own"},
    ),
    Case(
        "keyword regex is case-insensitive",
        (snapshot(1, trigger=trig(keyword_regex="agend(ar|amento)")),),
        dispatch("Quero um AGENDAMENTO amanhã"),
        1,
    ),
    Case(
        "keyword regex searches anywhere",
        (snapshot(1, trigger=trig(keyword_regex=r"\bpreço\b")),),
        dispatch("qual o PREÇO?"),
        1,
    ),
    Case(
        "keyword regex miss",
        (snapshot(1, trigger=trig(keyword_regex="boleto")),),
        dispatch("quero agendar"),
        None,
        {1: "keyword_regex"},
    ),
    Case(
        "invalid regex rejects, never raises",
        (snapshot(1, trigger=trig(keyword_regex="([unclosed")), snapshot(2, priority=-1)),
        dispatch(),
        2,
        {1: "keyword_regex_invalid"},
    ),
    Case(
        "business hours: inside, in the org's zone",
        (snapshot(1, trigger=trig(business_hours=SAO_PAULO_WEEKDAYS)),),
        dispatch(at=sp(T0, 10)),
        1,
    ),
    Case(
        "business hours: before opening local time (already open in UTC)",
        (snapshot(1, trigger=trig(business_hours=SAO_PAULO_WEEKDAYS)),),
        dispatch(at=sp(T0, 8, 30)),  # 11:30 UTC
        None,
        {1: "business_hours"},
    ),
    Case(
        "business hours: Friday evening local is Saturday in UTC",
        (snapshot(1, trigger=trig(business_hours=business_hours("America/Sao_Paulo", ("friday", 20 * 60, 23 * 60)))),),
        dispatch(at=sp(FRIDAY, 22)),  # Saturday 01:00 UTC
        1,
    ),
    Case(
        "business hours: end exclusive",
        (snapshot(1, trigger=trig(business_hours=SAO_PAULO_WEEKDAYS)),),
        dispatch(at=sp(T0, 18)),
        None,
        {1: "business_hours"},
    ),
    Case(
        "business hours: closed on Saturday",
        (snapshot(1, trigger=trig(business_hours=SAO_PAULO_WEEKDAYS)),),
        dispatch(at=sp(FRIDAY + timedelta(days=1), 10)),
        None,
        {1: "business_hours"},
    ),
    Case(
        "across midnight (end before start): Friday 23:00",
        (snapshot(1, trigger=trig(business_hours=LATE_FRIDAY_WRAPPED)),),
        dispatch(at=sp(FRIDAY, 23)),
        1,
    ),
    Case(
        "across midnight (end before start): Saturday 01:30",
        (snapshot(1, trigger=trig(business_hours=LATE_FRIDAY_WRAPPED)),),
        dispatch(at=sp(FRIDAY + timedelta(days=1), 1, 30)),
        1,
    ),
    Case(
        "across midnight (end before start): Saturday 02:00 is closed",
        (snapshot(1, trigger=trig(business_hours=LATE_FRIDAY_WRAPPED)),),
        dispatch(at=sp(FRIDAY + timedelta(days=1), 2)),
        None,
        {1: "business_hours"},
    ),
    Case(
        "across midnight (end past 24:00): Saturday 01:59",
        (snapshot(1, trigger=trig(business_hours=LATE_FRIDAY_PAST_24)),),
        dispatch(at=sp(FRIDAY + timedelta(days=1), 1, 59)),
        1,
    ),
    Case(
        "across midnight: Friday 01:00 is not covered by Thursday",
        (snapshot(1, trigger=trig(business_hours=LATE_FRIDAY_WRAPPED)),),
        dispatch(at=sp(FRIDAY, 1)),
        None,
        {1: "business_hours"},
    ),
    Case(
        "unknown time zone rejects",
        (snapshot(1, trigger=trig(business_hours=business_hours("Mars/Olympus", ("monday", 0, 1440)))),),
        dispatch(),
        None,
        {1: "business_hours"},
    ),
    Case(
        "other channel session is not a candidate",
        (snapshot(1, session=OTHER_SESSION),),
        dispatch(),
        None,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_selection_table(case: Case) -> None:
    selection = select(index_of(*case.agents), case.request)
    if case.chosen is None:
        assert selection.choice is None
        assert selection.reason
    else:
        assert selection.choice is not None
        assert selection.choice.agent_id == agent_id(case.chosen)
    results = dict(selection.considered)
    for n, rejection in case.rejections.items():
        assert results[agent_id(n)] == rejection


def test_other_orgs_agents_are_never_candidates() -> None:
    index = AgentIndex()
    index.apply(published(snapshot(1, org=OTHER_ORG, priority=99), org=OTHER_ORG))
    index.apply(published(snapshot(2)))
    assert select(index, dispatch()).choice.agent_id == agent_id(2)  # type: ignore[union-attr]
    assert select(index, dispatch(org=OTHER_ORG)).choice.agent_id == agent_id(1)  # type: ignore[union-attr]


@pytest.mark.parametrize("change", [PublishedChange.PAUSED, PublishedChange.ARCHIVED])
def test_paused_and_archived_agents_are_excluded(change: PublishedChange) -> None:
    top, other = snapshot(1, priority=10), snapshot(2)
    index = index_of(top, other)
    assert select(index, dispatch()).choice.agent_id == top.agent_id  # type: ignore[union-attr]
    index.apply(published(top, change=change))
    assert select(index, dispatch()).choice.agent_id == other.agent_id  # type: ignore[union-attr]
    assert index.agent(ORG, top.agent_id) is None
    # Republishing brings it back, at its rank.
    index.apply(published(top))
    assert select(index, dispatch()).choice.agent_id == top.agent_id  # type: ignore[union-attr]


def test_republishing_moves_an_agent_to_its_new_session_and_version() -> None:
    index = index_of(snapshot(1))
    moved = snapshot(1, session=OTHER_SESSION).model_copy(update={"version_id": uuid.uuid4()})
    index.apply(published(moved))
    assert select(index, dispatch()).choice is None
    choice = select(index, dispatch(session=OTHER_SESSION)).choice
    assert choice is not None and choice.version_id == moved.version_id
    assert len(index) == 1


def test_the_choice_carries_the_versions_policy() -> None:
    choice = select(index_of(snapshot(1, policy=ConcurrencyPolicy.INTERRUPT)), dispatch()).choice
    assert choice is not None and choice.policy is ConcurrencyPolicy.INTERRUPT


def test_a_target_agent_skips_ranking_and_triggers() -> None:
    picky = snapshot(1, trigger=trig(keyword_regex="never-matches"))
    index = index_of(picky, snapshot(2, priority=50))
    choice = select(index, dispatch(target=picky.agent_id)).choice
    assert choice is not None and choice.agent_id == picky.agent_id
    missing = select(index, dispatch(target=agent_id(9)))
    assert missing.choice is None and missing.reason == "target agent is not published"


def test_a_target_draft_version_needs_no_published_snapshot() -> None:
    draft = uuid.uuid4()
    choice = select(AgentIndex(), dispatch(target=agent_id(7), target_version=draft, dry_run=True)).choice
    assert choice is not None and (choice.agent_id, choice.version_id) == (agent_id(7), draft)


def test_keyword_patterns_are_compiled_once_in_a_bounded_cache() -> None:
    cached_keyword.cache_clear()
    for _ in range(3):
        trigger_rejection(trig(keyword_regex="agendar"), dispatch("agendar"))
    info = cached_keyword.cache_info()
    assert (info.misses, info.hits, info.maxsize) == (1, 2, KEYWORD_CACHE_SIZE)
    for n in range(KEYWORD_CACHE_SIZE + 50):
        cached_keyword(f"kw{n}")
    assert cached_keyword.cache_info().currsize == KEYWORD_CACHE_SIZE


def test_a_catastrophic_pattern_costs_one_timeout_then_is_disabled() -> None:
    """``^(a|aa)+$`` backtracks exponentially on ``a``s and a ``!``: the search gives up at the
    timeout, and the pattern is disabled in this process, so the next dispatch pays nothing."""
    cached_keyword.cache_clear()
    trigger = trig(keyword_regex="^(a|aa)+$")
    started = time.perf_counter()
    assert trigger_rejection(trigger, dispatch("a" * 60 + "!")) == "keyword_regex_timeout"
    assert time.perf_counter() - started < 1.0
    again = time.perf_counter()
    assert trigger_rejection(trigger, dispatch("aaaa")) == "keyword_regex_timeout"
    assert time.perf_counter() - again < SEARCH_TIMEOUT_S / 2, "disabled: not searched again"


@pytest.mark.parametrize(
    ("pattern", "text", "rejection"),
    [
        ("FALAR com (humano|atendente)", "quero falar COM humano", None),  # case-insensitive
        (r"\bolá\b", "oi, OLÁ!", None),  # Unicode word boundaries, as Python's re (RE2's are ASCII)
        (r"\bé\b", "é isso", None),
        (r"\w+ção", "uma SITUAÇÃO", None),
        (r"pix(?!.*boleto)", "pode ser pix", None),  # lookarounds, as before
        (r"pix(?!.*boleto)", "pix ou boleto", "keyword_regex"),
        ("pre(ço", "preço", "keyword_regex_invalid"),  # never saved by the API: rejects, never crashes
        ("boleto", "pix", "keyword_regex"),
    ],
)
def test_keyword_patterns_keep_pythons_syntax_and_unicode(pattern: str, text: str, rejection: str | None) -> None:
    assert trigger_rejection(trig(keyword_regex=pattern), dispatch(text)) == rejection


def test_business_hours_follow_daylight_saving_time() -> None:
    # New York: 09:00-17:00 Mondays. 13:30 UTC is 09:30 in March after the switch (EDT, UTC-4)
    # but 08:30 before it (EST, UTC-5).
    hours = business_hours("America/New_York", ("monday", 9 * 60, 17 * 60))
    assert in_business_hours(hours, datetime.fromisoformat("2026-03-09T13:30:00+00:00"))
    assert not in_business_hours(hours, datetime.fromisoformat("2026-03-02T13:30:00+00:00"))
