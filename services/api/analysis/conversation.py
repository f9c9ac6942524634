"""The org's internal analysis conversation: what an analysis run is keyed by (docs/analysis.md).

Runs are conversation-keyed (dispatcher, runner, run log), so each org gets one internal
conversation, chat id :data:`ANALYSIS_CHAT_ID`, with an internal contact that has no
phone, e-mail or name of a person. It is never a customer's chat.
"""

from __future__ import annotations

import uuid
from typing import Final

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from switchboard.db.models import ChannelSession, Contact, Conversation
from switchboard.internal_chats import ANALYSIS_CHAT_ID

ANALYSIS_CONTACT_LABEL: Final = "Daily analysis"


def ensure_analysis_conversation(
    session: Session, org_id: uuid.UUID, channel_session_id: uuid.UUID | None
) -> Conversation | None:
    """The org's analysis conversation on ``channel_session_id`` (else the org's oldest live session), locked.

    None when the org has no channel session at all. Idempotent under concurrency: both
    inserts are ``ON CONFLICT DO NOTHING`` on their unique keys, then the row is read back.
    """
    if channel_session_id is None:
        channel_session_id = session.scalar(
            select(ChannelSession.id)
            .where(ChannelSession.org_id == org_id, ChannelSession.archived_at.is_(None))
            .order_by(ChannelSession.created_at, ChannelSession.id)
            .limit(1)
        )
        if channel_session_id is None:
            return None
    session.execute(
        insert(Contact)
        .values(org_id=org_id, external_id=ANALYSIS_CHAT_ID, display_name=ANALYSIS_CONTACT_LABEL)
        .on_conflict_do_nothing(index_elements=[Contact.org_id, Contact.external_id])
    )
    contact_id = session.scalar(
        select(Contact.id).where(Contact.org_id == org_id, Contact.external_id == ANALYSIS_CHAT_ID)
    )
    session.execute(
        insert(Conversation)
        .values(org_id=org_id, channel_session_id=channel_session_id, contact_id=contact_id, chat_id=ANALYSIS_CHAT_ID)
        .on_conflict_do_nothing(index_elements=[Conversation.channel_session_id, Conversation.chat_id])
    )
    # Outbox writers of a conversation serialize on its row (records keep commit order).
    return session.scalars(
        select(Conversation)
        .where(
            Conversation.org_id == org_id,
            Conversation.channel_session_id == channel_session_id,
            Conversation.chat_id == ANALYSIS_CHAT_ID,
        )
        .with_for_update()
    ).one()
