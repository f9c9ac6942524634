"""Executes an approved action with the tool server's own implementation, in process.

The write tools' effect lives in ``services/api/mcp/tools.py`` (same process): approval
calls the same ``CrmTools`` method the MCP server calls, with claims naming the
proposing run, so the tool's own idempotency keys (per run and content) hold too.
"""

from __future__ import annotations

import math
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from services.api.mcp.tools import CrmTools, ToolFailure
from switchboard.run_tokens import RunTokenClaims
from switchboard.tool_catalog import CANCEL_FOLLOWUP, SCHEDULE_FOLLOWUP, SEND_WHATSAPP_MESSAGE


class NotExecutable(ToolFailure):
    """The action names a tool approval cannot run."""


def _minutes_left(due_in_minutes: int, proposed_at: datetime | None) -> int:
    """A follow-up proposed "in 16 hours" on Friday at 17:00 is due Saturday at 9:00 however long the
    owner took to approve it (approved Monday, it fired on Tuesday at 2:00: 2026-12-05). Already past:
    refused, so the owner proposes, or schedules, a time that still means something."""
    if proposed_at is None or due_in_minutes < 1:
        return due_in_minutes  # the tool refuses what is out of range
    due_at = proposed_at + timedelta(minutes=due_in_minutes)
    left = (due_at - datetime.now(UTC)).total_seconds() / 60
    if left < 1:
        raise ToolFailure(
            f"the follow-up was due at {due_at:%Y-%m-%d %H:%M} UTC, before this approval; schedule it again"
        )
    return math.ceil(left)


def claims_for(org_id: uuid.UUID, run_id: uuid.UUID, action: dict[str, Any]) -> RunTokenClaims:
    return RunTokenClaims(
        org_id=org_id,
        run_id=run_id,
        agent_id=uuid.UUID(action["agent_id"]),
        conversation_id=uuid.UUID(action["conversation_id"]),
        contact_id=uuid.UUID(action["contact_id"]),
        channel_session_id=uuid.UUID(action["channel_session_id"]),
        tools=frozenset({str(action["tool_name"])}),
        dry_run=False,
        expires_at=int(time.time()) + 60,
        approved=True,
    )


async def execute(
    tools: CrmTools,
    claims: RunTokenClaims,
    tool_name: str,
    arguments: dict[str, Any],
    *,
    proposed_at: datetime | None = None,
) -> dict[str, Any]:
    """Run the write tool; a :class:`ToolFailure` says why it could not act. ``proposed_at``: when
    the agent proposed it (relative times in its arguments count from then)."""
    if tool_name == SEND_WHATSAPP_MESSAGE:
        return await tools.send_whatsapp_message(claims, text=str(arguments.get("text", "")))
    if tool_name == SCHEDULE_FOLLOWUP:
        minutes = int(arguments.get("due_in_minutes", 0))
        return await tools.schedule_followup(
            claims, reason=str(arguments.get("reason", "")), due_in_minutes=_minutes_left(minutes, proposed_at)
        )
    if tool_name == CANCEL_FOLLOWUP:
        return await tools.cancel_followup(claims, followup_id=str(arguments.get("followup_id", "")))
    raise NotExecutable(f"{tool_name} cannot be executed by an approval")
