"""The names of the internal CRM tools and what kind each is, shared by the runner and the tool server.

The tool server (services/api/mcp) implements them; the runner decides which of
them a run is offered (the version's ``tool_ids``, the handoff tool, the
follow-up switch) and puts exactly that list in the run's token. Both sides
read the names from here so they cannot drift. Schemas and descriptions come
from the server itself (MCP ``tools/list``), never from a copy.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class ToolKind(StrEnum):
    """Read tools only look; write tools act on the world (gated by autonomy, next issue)."""

    READ = "read"
    WRITE = "write"


SEARCH_CONTACTS: Final = "crm_search_contacts"
CONVERSATION_HISTORY: Final = "crm_get_conversation_history"
SEND_WHATSAPP_MESSAGE: Final = "crm_send_whatsapp_message"
REQUEST_HUMAN_HANDOFF: Final = "crm_request_human_handoff"
SCHEDULE_FOLLOWUP: Final = "crm_schedule_followup"
LIST_FOLLOWUPS: Final = "crm_list_followups"
CANCEL_FOLLOWUP: Final = "crm_cancel_followup"

TOOL_KINDS: Final[dict[str, ToolKind]] = {
    SEARCH_CONTACTS: ToolKind.READ,
    CONVERSATION_HISTORY: ToolKind.READ,
    SEND_WHATSAPP_MESSAGE: ToolKind.WRITE,
    REQUEST_HUMAN_HANDOFF: ToolKind.WRITE,
    SCHEDULE_FOLLOWUP: ToolKind.WRITE,
    LIST_FOLLOWUPS: ToolKind.READ,
    CANCEL_FOLLOWUP: ToolKind.WRITE,
}

# Offered only when the version's ``followup.callback_enabled`` allows it [004 §4.4];
# listing and cancelling stay available.
FOLLOWUP_CREATION_TOOLS: Final = frozenset({SCHEDULE_FOLLOWUP})

# Urgency levels the handoff tool accepts (the ``Urgency`` enum of the contracts).
HANDOFF_URGENCIES: Final = ("low", "normal", "high", "urgent")


def is_known_tool(name: str) -> bool:
    return name in TOOL_KINDS
