"""Executes an approved action with the tool server's own implementation, in process.

The write tools' effect lives in ``services/api/mcp/tools.py`` (same process): approval
calls the same ``CrmTools`` method the MCP server calls, with claims naming the
proposing run, so the tool's own idempotency keys (per run and content) hold too.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from services.api.mcp.tools import CrmTools, ToolFailure
from switchboard.run_tokens import RunTokenClaims
from switchboard.tool_catalog import CANCEL_FOLLOWUP, SCHEDULE_FOLLOWUP, SEND_WHATSAPP_MESSAGE


class NotExecutable(ToolFailure):
    """The action names a tool approval cannot run."""


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


async def execute(tools: CrmTools, claims: RunTokenClaims, tool_name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Run the write tool; a :class:`ToolFailure` says why it could not act."""
    if tool_name == SEND_WHATSAPP_MESSAGE:
        return await tools.send_whatsapp_message(claims, text=str(arguments.get("text", "")))
    if tool_name == SCHEDULE_FOLLOWUP:
        return await tools.schedule_followup(
            claims, reason=str(arguments.get("reason", "")), due_in_minutes=int(arguments.get("due_in_minutes", 0))
        )
    if tool_name == CANCEL_FOLLOWUP:
        return await tools.cancel_followup(claims, followup_id=str(arguments.get("followup_id", "")))
    raise NotExecutable(f"{tool_name} cannot be executed by an approval")
