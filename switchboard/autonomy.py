"""Autonomy policy shared by the runner and the API [000 §3]: what a write tool may do.

Each org and area has a mode: ``off`` (the area's write tools are not offered),
``propose`` (the default: the write becomes a proposed action for the owner) or
``auto`` (executed and recorded). One action type (a write tool) may have its own
``propose`` or ``auto`` over its area's (``workspace_action_autonomy``). The org's kill
switch and an area's kill switch force ``off``, and so does an area set to ``off``,
whatever its action types say. After the owner approved the same action type
``PROMOTE_AFTER_APPROVALS`` times, the system *suggests* ``auto`` for that action type
— never switches, and never the whole area.
The functions here are pure except :func:`load_settings` (three small queries, RLS-scoped).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from enum import StrEnum
from typing import Final

from sqlalchemy import select
from sqlalchemy.orm import Session

from switchboard.contracts import Serde, Topics
from switchboard.contracts.enums import InsightKind
from switchboard.contracts.records import Action, Insight, SuggestedAction
from switchboard.db.enums import AutonomyMode
from switchboard.db.insights import upsert_insight
from switchboard.db.models import Organization
from switchboard.db.models.autonomy import WorkspaceActionAutonomy, WorkspaceAutonomy
from switchboard.db.outbox import enqueue_record
from switchboard.tool_catalog import gated_area

DEFAULT_MODE: Final = AutonomyMode.PROPOSE
PROMOTE_AFTER_APPROVALS: Final = 3


class Gate(StrEnum):
    """What happens to one tool call."""

    RUN = "run"  # a read tool or an ungated write: runs as usual
    HIDDEN = "hidden"  # area off: never offered; a call to it anyway is refused
    PROPOSE = "propose"  # recorded for the owner's approval, not executed
    EXECUTE = "execute"  # runs, recorded as an executed action


@dataclass(frozen=True, slots=True)
class AutonomySettings:
    """An org's autonomy: per-area modes as stored, the kill switches."""

    org_kill_switch: bool = False
    modes: Mapping[str, AutonomyMode] = field(default_factory=dict)
    killed_areas: frozenset[str] = frozenset()
    # Action types (write tool names) with a mode of their own: propose or auto.
    action_modes: Mapping[str, AutonomyMode] = field(default_factory=dict)

    def mode(self, area: str) -> AutonomyMode:
        """The area's effective mode: a kill switch wins, an area never set is ``propose``."""
        if self.org_kill_switch or area in self.killed_areas:
            return AutonomyMode.OFF
        return self.modes.get(area, DEFAULT_MODE)

    def action_mode(self, area: str, action_type: str) -> AutonomyMode:
        """One action type's effective mode: off when its area is (kill switches included), else
        its own mode if it has one, else its area's."""
        area_mode = self.mode(area)
        if area_mode is AutonomyMode.OFF:
            return AutonomyMode.OFF
        return self.action_modes.get(action_type, area_mode)

    def gate(self, tool_name: str) -> Gate:
        area = gated_area(tool_name)
        if area is None:
            return Gate.RUN
        return {AutonomyMode.OFF: Gate.HIDDEN, AutonomyMode.PROPOSE: Gate.PROPOSE, AutonomyMode.AUTO: Gate.EXECUTE}[
            self.action_mode(area, tool_name)
        ]

    def offered(self, granted: Iterable[str]) -> tuple[str, ...]:
        """The granted tools minus the write tools of areas that are off."""
        return tuple(name for name in granted if self.gate(name) is not Gate.HIDDEN)


# The insight key of a proposed action's Home item (``proposal_key``): one per action, its id the
# action's (the decision row, the insight and ``Action.action_id`` share it).
PROPOSAL_KEY_PREFIX: Final = "decision:"


def proposal_key(action_id: uuid.UUID | str) -> str:
    """The dedupe key of a proposed action's ``workspace_insights`` row."""
    return f"{PROPOSAL_KEY_PREFIX}{action_id}"


# The insight key of a promote suggestion's row (``promotion_key``): its Home card is the brief's
# promotion, and it is answered through /api/v1/autonomy/{area}/promotions/{type}:accept|:dismiss.
PROMOTION_KEY_PREFIX: Final = "promote:"


def promotion_key(area: str, action_type: str) -> str:
    """The dedupe key of a promote suggestion's ``workspace_insights`` row (the owner's answer is kept there)."""
    return f"{PROMOTION_KEY_PREFIX}{area}:{action_type}"


def promotion_due(approvals: int, current_mode: AutonomyMode) -> bool:
    """Suggest ``auto`` exactly when the approval count reaches the threshold while the action type
    proposes (``current_mode``: :meth:`AutonomySettings.action_mode`)."""
    return approvals == PROMOTE_AFTER_APPROVALS and current_mode is AutonomyMode.PROPOSE


def load_settings(session: Session, org_id: uuid.UUID) -> AutonomySettings:
    """The org's settings, one round trip per table (the session's tenant must be ``org_id``)."""
    kill = session.scalar(select(Organization.autonomy_kill_switch).where(Organization.id == org_id))
    rows = session.execute(
        select(WorkspaceAutonomy.area, WorkspaceAutonomy.mode, WorkspaceAutonomy.kill_switch).where(
            WorkspaceAutonomy.org_id == org_id
        )
    ).all()
    actions = session.execute(
        select(WorkspaceActionAutonomy.action_type, WorkspaceActionAutonomy.mode).where(
            WorkspaceActionAutonomy.org_id == org_id
        )
    ).all()
    return AutonomySettings(
        org_kill_switch=bool(kill),
        modes={r.area: AutonomyMode(r.mode) for r in rows},
        killed_areas=frozenset(r.area for r in rows if r.kill_switch),
        action_modes={r.action_type: AutonomyMode(r.mode) for r in actions},
    )


@dataclass(frozen=True, slots=True)
class InsightNote:
    """One Home to-do item: a proposed action or a promote-to-auto suggestion."""

    org_id: uuid.UUID
    key: str
    kind: InsightKind
    area: str
    title: str
    body: str
    day: date
    decision_id: uuid.UUID | None = None
    proposed_action: Action | None = None
    suggested_actions: tuple[SuggestedAction, ...] = ()
    run_id: uuid.UUID | None = None
    agent_id: uuid.UUID | None = None
    conversation_id: uuid.UUID | None = None
    request_id: str | None = None


def publish_insight(session: Session, serde: Serde, note: InsightNote) -> uuid.UUID:
    """Upsert the ``workspace_insights`` row and put the ``insights`` record in the outbox, atomically.

    Idempotent on ``note.key``: a second call refreshes the row and keeps the owner's status."""
    row = upsert_insight(
        session,
        org_id=note.org_id,
        dedupe_key=note.key,
        area=note.area,
        title=note.title,
        body=note.body,
        kind=note.kind,
        suggested_actions=[s.model_dump(mode="json") for s in note.suggested_actions],
        insight_date=note.day,
        run_id=note.run_id,
        agent_decision_id=note.decision_id,
    )
    record = Insight(
        org_id=note.org_id,
        request_id=note.request_id,
        insight_id=row.id,
        insight_key=note.key,
        insight_date=note.day,
        kind=note.kind,
        area=note.area,
        title=note.title,
        body=note.body,
        status=row.status,
        suggested_actions=note.suggested_actions,
        proposed_action=note.proposed_action,
        agent_id=note.agent_id,
        run_id=note.run_id,
        conversation_id=note.conversation_id,
    )
    enqueue_record(session, Topics.INSIGHTS, record, serde=serde)
    return row.id
