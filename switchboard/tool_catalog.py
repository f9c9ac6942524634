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
    """Read tools only look; write tools act on the world (gated by autonomy, docs/autonomy.md)."""

    READ = "read"
    WRITE = "write"


SEARCH_CONTACTS: Final = "crm_search_contacts"
CONVERSATION_HISTORY: Final = "crm_get_conversation_history"
SEND_WHATSAPP_MESSAGE: Final = "crm_send_whatsapp_message"
REQUEST_HUMAN_HANDOFF: Final = "crm_request_human_handoff"
SCHEDULE_FOLLOWUP: Final = "crm_schedule_followup"
LIST_FOLLOWUPS: Final = "crm_list_followups"
CANCEL_FOLLOWUP: Final = "crm_cancel_followup"
# Long-term memory (docs/memory.md): a durable fact about the contact or the business.
MEMORY_SAVE_FACT: Final = "memory_save_fact"
# Scheduled analysis (docs/analysis.md): aggregated, PII-free data in; insights for the Home out.
ANALYTICS_AREA_SUMMARY: Final = "analytics_area_summary"
INSIGHTS_PUBLISH: Final = "insights_publish"

TOOL_KINDS: Final[dict[str, ToolKind]] = {
    SEARCH_CONTACTS: ToolKind.READ,
    CONVERSATION_HISTORY: ToolKind.READ,
    SEND_WHATSAPP_MESSAGE: ToolKind.WRITE,
    REQUEST_HUMAN_HANDOFF: ToolKind.WRITE,
    SCHEDULE_FOLLOWUP: ToolKind.WRITE,
    LIST_FOLLOWUPS: ToolKind.READ,
    CANCEL_FOLLOWUP: ToolKind.WRITE,
    MEMORY_SAVE_FACT: ToolKind.WRITE,
    ANALYTICS_AREA_SUMMARY: ToolKind.READ,
    INSIGHTS_PUBLISH: ToolKind.WRITE,
}

# Offered only when the version's ``followup.callback_enabled`` allows it [004 §4.4];
# listing and cancelling stay available.
FOLLOWUP_CREATION_TOOLS: Final = frozenset({SCHEDULE_FOLLOWUP})

# Urgency levels the handoff tool accepts (the ``Urgency`` enum of the contracts).
HANDOFF_URGENCIES: Final = ("low", "normal", "high", "urgent")


# The business area (switchboard/catalog/areas.yaml) each autonomy-gated write tool acts in [000 §3].
WRITE_TOOL_AREAS: Final[dict[str, str]] = {
    SEND_WHATSAPP_MESSAGE: "crm",
    SCHEDULE_FOLLOWUP: "crm",
    CANCEL_FOLLOWUP: "crm",
}

# Write tools never gated by autonomy: asking for a person is a safety valve, not an action.
# Saving a fact writes only our own memory (docs/memory.md), nothing the customer sees; publishing
# insights only fills the owner's Home (docs/analysis.md).
UNGATED_WRITE_TOOLS: Final = frozenset({REQUEST_HUMAN_HANDOFF, MEMORY_SAVE_FACT, INSIGHTS_PUBLISH})

# How an executed action is undone, where it can be: the undo tool and the result field naming
# the argument it needs ({undo argument: result field}). A sent message cannot be unsent.
UNDO_TOOLS: Final[dict[str, tuple[str, dict[str, str]]]] = {
    SCHEDULE_FOLLOWUP: (CANCEL_FOLLOWUP, {"followup_id": "followup_id"}),
}


def gated_area(name: str) -> str | None:
    """The area whose autonomy decides this tool, or None when autonomy does not apply (reads)."""
    if TOOL_KINDS.get(name) is not ToolKind.WRITE or name in UNGATED_WRITE_TOOLS:
        return None
    return WRITE_TOOL_AREAS.get(name, "cross")


def gated_write_tools() -> dict[str, str]:
    """Every autonomy-gated write tool (an *action type*) and its area, in catalog order."""
    return {name: area for name in TOOL_KINDS if (area := gated_area(name)) is not None}


def is_known_tool(name: str) -> bool:
    return name in TOOL_KINDS
