"""What time it is for the business: the agent's prompt says "now" in the org's time zone.

Without it a model guesses the date and the hour — "I'll remind you tomorrow at 9" was scheduled
hours off (the follow-up tool takes minutes from now), and times told to customers were UTC or
invented. The org's ``organizations.time_zone`` (the one its morning digest uses) is read with
the run's subject (:class:`ClockPreload`); the line is the last system layer, after the wake
context that changes with every run anyway, so the provider's prompt cache within a run is
untouched (the time is taken once, when the prompt is composed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from services.runner.context import ContextBuilder, DraftBuilder
from services.runner.preload import MISSING, preloaded
from services.runner.subject import RunSubject
from switchboard.contracts import RunRequested
from switchboard.time_zones import load_time_zone

CLOCK_KEY: Final = "org_time_zone"
LABEL: Final = "Now"


class ClockPreload:
    """The org's time zone, read with the run's subject (services/runner/preload.py)."""

    key = CLOCK_KEY
    sql = "SELECT o.time_zone FROM organizations AS o WHERE o.id = :org_id"

    def params(self, request: RunRequested) -> Mapping[str, Any]:
        return {}

    def parse(self, value: Any, subject: RunSubject) -> object:
        return value if isinstance(value, str) and value else MISSING


class ClockLayer:
    """``Now: Saturday, 2026-12-05 09:30 (America/Sao_Paulo, UTC-03:00).`` — UTC when the org's zone
    is unknown here (a subject built without the preload: a sub-agent, a test)."""

    name = "clock"

    def __init__(self, now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._now = now

    async def build(self, subject: RunSubject, draft: DraftBuilder) -> None:
        draft.layer(LABEL, now_line(subject, self._now()))


def now_line(subject: RunSubject, now: datetime) -> str:
    """The layer's text for ``now`` (an aware datetime)."""
    name = preloaded(subject, CLOCK_KEY)
    zone = load_time_zone(name) if isinstance(name, str) else None
    label = name if zone is not None else "UTC"
    local = now.astimezone(zone or UTC)
    offset = local.strftime("%z")
    return (
        f"{local:%A, %Y-%m-%d %H:%M} ({label}, UTC{offset[:3]}:{offset[3:]}). Dates and times you tell the "
        "customer are in this time zone; a follow-up's due_in_minutes counts from this moment."
    )


def with_clock(builders: Sequence[ContextBuilder]) -> list[ContextBuilder]:
    """``builders`` with the clock last: the last system layer."""
    return [*builders, ClockLayer()]
