"""Conversations Switchboard keeps for itself: never a customer's chat, never sent to.

Runs are keyed by conversation, so work that has no customer — a dry run from the agent
editor, the daily analysis — happens in internal conversations whose chat id starts with
:data:`INTERNAL_CHAT_PREFIX` (a WhatsApp chat id never does: ``<digits>@c.us`` / ``@g.us``).
The runner announces no send target for them and the notifier refuses to send to them.
"""

from __future__ import annotations

from typing import Final

INTERNAL_CHAT_PREFIX: Final = "switchboard-"
# One per channel session and caller: the agent editor's test conversation (docs/runner.md, dry run).
TEST_CHAT_PREFIX: Final = f"{INTERNAL_CHAT_PREFIX}test-"
# One per org: where the daily analysis agent runs (docs/analysis.md).
ANALYSIS_CHAT_ID: Final = f"{INTERNAL_CHAT_PREFIX}analysis"


def is_internal_chat(chat_id: str | None) -> bool:
    """True for a conversation no customer is on the other end of."""
    return chat_id is not None and chat_id.startswith(INTERNAL_CHAT_PREFIX)
