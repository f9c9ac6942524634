"""Telling the owner a WhatsApp number stopped working.

When WAHA reports that a session which was ``working`` is now stopped, failed or waiting
for a QR scan, no customer message arrives and none is answered — silently, unless someone
says so. The transition (not each repeated report: a redelivery finds the session already
down) becomes a critical Home insight and an ``insights`` record in the same transaction
(outbox). The brief puts it on today's to-do list; the notifier sends the org's webhook
event ``channel.disconnected`` (key prefix ``channel_down:``). Each outage has its own key,
so an insight the owner dismissed does not hide the next outage.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Final

from sqlalchemy.orm import Session

from switchboard.areas import CROSS
from switchboard.contracts import Insight, InsightKind, InsightStatus, Serde, Topics
from switchboard.db.daily_brief import local_day, org_zone
from switchboard.db.enums import ChannelSessionStatus, InsightSeverity
from switchboard.db.insights import upsert_insight
from switchboard.db.outbox import enqueue_record

CHANNEL_DOWN_PREFIX: Final = "channel_down:"
DOWN_STATUSES: Final = frozenset(
    {ChannelSessionStatus.STOPPED, ChannelSessionStatus.FAILED, ChannelSessionStatus.SCAN_QR}
)
_WHAT_TO_DO: Final = {
    ChannelSessionStatus.SCAN_QR: "WhatsApp logged the number out: scan the QR code in WAHA to connect it again.",
    ChannelSessionStatus.STOPPED: "The WAHA session was stopped: start it again in WAHA.",
    ChannelSessionStatus.FAILED: "The WAHA session failed: restart it in WAHA and check its logs.",
}


def is_disconnection(previous: str | None, current: ChannelSessionStatus) -> bool:
    return previous == ChannelSessionStatus.WORKING.value and current in DOWN_STATUSES


def announce_disconnected(
    session: Session,
    serde: Serde,
    *,
    org_id: uuid.UUID,
    channel_session_id: uuid.UUID,
    label: str,
    phone_number: str | None,
    status: ChannelSessionStatus,
    request_id: str | None,
) -> Insight:
    """The critical insight of one outage, stored and queued for the brief and the notifier."""
    now = datetime.now(UTC)
    day = local_day(now, org_zone(session, org_id))
    key = f"{CHANNEL_DOWN_PREFIX}{channel_session_id}:{now:%Y%m%dT%H%M%S%fZ}"
    number = f" ({phone_number})" if phone_number else ""
    title = f"WhatsApp number {label}{number} is disconnected"
    body = f"{_WHAT_TO_DO[status]} Until then no customer message on it arrives or is answered."
    row = upsert_insight(
        session,
        org_id=org_id,
        dedupe_key=key,
        area=CROSS,
        title=title,
        body=body,
        severity=InsightSeverity.CRITICAL,
        insight_date=day,
    )
    record = Insight(
        org_id=org_id,
        request_id=request_id or None,
        insight_id=row.id,
        insight_key=key,
        insight_date=day,
        kind=InsightKind.INSIGHT,
        area=CROSS,
        title=title,
        body=body,
        status=InsightStatus.NEW,
    )
    enqueue_record(session, Topics.INSIGHTS, record, serde=serde)
    return record
