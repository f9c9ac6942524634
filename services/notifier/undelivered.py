"""Messages the channel never took: the humans are told (``message.undelivered``).

A run can be ``completed`` while its reply never reached the customer [002 "completed non
significa consegnato"]: WAHA refused it, the session was deleted, the retries ran out, or a
stop cut the retries short so nobody knows (``unknown``). The run table and the Home's pulse
say so the next morning; the customer, meanwhile, waits for an answer that is not coming.
So once a send's outcome is recorded as failed or unknown the org's webhook hears of it,
once per message (the notification row is written in the outcome's own transaction, so a
crash cannot record the one without the other). Not for a message withheld because people
took the conversation over (they are the ones answering), nor for an outcome the sweep of
stale claims turned ``unknown`` after a crash (docs/notifier.md "Known limits").
"""

from __future__ import annotations

import uuid
from typing import Any, Final

EVENT_TYPE: Final = "message.undelivered"


def dedupe_key(message_id: uuid.UUID) -> str:
    return f"undelivered:{message_id}"


def payload(
    *,
    message_id: uuid.UUID,
    kind: str,
    run_id: uuid.UUID | None,
    conversation_id: uuid.UUID,
    contact_id: uuid.UUID | None,
    channel_session_id: uuid.UUID | None,
    outcome: str,
    error_code: str | None,
    attempts: int,
) -> dict[str, Any]:
    """What the humans need to find the conversation and resend by hand; never the message's text
    (personal data) nor the channel's error message (it can quote the upstream's answer)."""
    return {
        "message_id": str(message_id),
        "kind": kind,
        "run_id": None if run_id is None else str(run_id),
        "conversation_id": str(conversation_id),
        "contact_id": None if contact_id is None else str(contact_id),
        "channel_session_id": None if channel_session_id is None else str(channel_session_id),
        "outcome": outcome,
        "error_code": error_code,
        "attempts": attempts,
    }
