"""The conversation's state [003 "Lo stato del grafo"] (docs/memory.md "State").

Conclusions of sub-steps go into state; intermediate tool chatter stays in the trace. A run whose
version grants the local tool ``state_note`` may call ``state_note(text)`` to replace the
conversation's note (``conversation_state_notes``: one short text per conversation, in PostgreSQL);
every later run of the conversation gets it as the **State** prompt layer, right after the memory
layers. Tool calls and their results are recorded only in the run's trace: the history builder
replays message texts, never tool results, so a later prompt never sees an earlier run's tool output.

The note is stored with real values (aliases revealed, like a message) and pseudonymized again with
the rest of the prompt before it reaches a provider.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from sqlalchemy import exists, func, literal, select
from sqlalchemy.dialects.postgresql import UUID as PG_UUID
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from services.runner.context import ContextBuilder, DraftBuilder
from services.runner.interceptors import CallContext, ToolInterceptor
from services.runner.memory import insert_after
from services.runner.pii import Pseudonymizer
from services.runner.preload import MISSING, read_once
from services.runner.providers.base import ToolCallRequest, ToolOutcome, ToolSpec
from services.runner.subject import RunSubject
from switchboard.contracts import RunRequested
from switchboard.db.enums import ACTIVE_RUN_STATUSES
from switchboard.db.models import AiAgentRun
from switchboard.db.models.memory import MAX_STATE_NOTE_CHARS, STATE_NOTE_TOOL, ConversationStateNote
from switchboard.db.session import async_tenant_transaction

LABEL: Final = "State"
STATE_NOTE_KEY: Final = "state_note"
STATE_NOTE_SPEC: Final = ToolSpec(
    name=STATE_NOTE_TOOL,
    description=(
        "Replace this conversation's state note: the conclusions so far (decisions, what the customer "
        f"wants, open points), at most {MAX_STATE_NOTE_CHARS} characters. Later turns see it; tool results do not "
        "carry over, so write down what you concluded from them."
    ),
    input_schema={
        "type": "object",
        "properties": {"text": {"type": "string", "description": "the whole new note (it replaces the old one)"}},
        "required": ["text"],
    },
)


async def _read_note(session: AsyncSession, org_id: uuid.UUID, conversation_id: uuid.UUID) -> str | None:
    note: str | None = await session.scalar(
        select(ConversationStateNote.note).where(
            ConversationStateNote.org_id == org_id, ConversationStateNote.conversation_id == conversation_id
        )
    )
    return note


class StateStore:
    """Reads and replaces the note of a conversation (one short tenant transaction each)."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def note(self, org_id: uuid.UUID, conversation_id: uuid.UUID) -> str | None:
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            return await _read_note(session, org_id, conversation_id)

    async def replace(self, org_id: uuid.UUID, conversation_id: uuid.UUID, run_id: uuid.UUID, note: str) -> bool:
        """Replace the note while ``run_id`` is still going; False when it is not (closed as lost — its
        recovery may have written a newer note, or the contact was erased since: a late write put the
        person's data back)."""
        values = {"note": note, "updated_by_run_id": run_id}
        going = exists().where(
            AiAgentRun.org_id == org_id,
            AiAgentRun.id == run_id,
            AiAgentRun.status.in_([s.value for s in ACTIVE_RUN_STATUSES]),
        )
        row = select(
            literal(org_id, PG_UUID(as_uuid=True)),
            literal(conversation_id, PG_UUID(as_uuid=True)),
            literal(note),
            literal(run_id, PG_UUID(as_uuid=True)),
        ).where(going)
        async with self._sessions() as session, async_tenant_transaction(session, org_id):
            written = await session.scalar(
                insert(ConversationStateNote)
                .from_select(["org_id", "conversation_id", "note", "updated_by_run_id"], row)
                .on_conflict_do_update(
                    index_elements=[ConversationStateNote.conversation_id], set_={**values, "updated_at": func.now()}
                )
                .returning(ConversationStateNote.conversation_id)
            )
            return written is not None


class StateLayer:
    """The **State** layer: the conversation's note, when there is one."""

    name = "state"

    def __init__(self, store: StateStore) -> None:
        self._store = store

    async def build(self, subject: RunSubject, draft: DraftBuilder) -> None:
        if subject.conversation is None:
            return
        request = subject.request
        note = await read_once(
            subject, STATE_NOTE_KEY, lambda: self._store.note(request.org_id, request.conversation_id)
        )
        if note:
            draft.layer(LABEL, f"What earlier turns of this conversation concluded:\n{note}")


class StateNoteTool:
    """The local ``state_note`` tool: answered here, never sent to the tool server."""

    def __init__(self, store: StateStore, subject: RunSubject, pii: Pseudonymizer) -> None:
        self._store = store
        self._subject = subject
        self._pii = pii

    async def before_call(self, ctx: CallContext, call: ToolCallRequest) -> ToolOutcome | None:
        if call.name != STATE_NOTE_TOOL:
            return None
        text = self._pii.reveal(str(call.arguments.get("text", ""))).strip()
        if not text:
            return ToolOutcome(call.id, call.name, "The note is empty: write the conclusions in `text`.", is_error=True)
        if len(text) > MAX_STATE_NOTE_CHARS:
            return ToolOutcome(
                call.id, call.name, f"The note holds at most {MAX_STATE_NOTE_CHARS} characters: shorten it.", True
            )
        request = self._subject.request
        if request.dry_run:  # a test run changes nothing a later live turn would read (docs/memory.md)
            return ToolOutcome(call.id, call.name, json.dumps({"status": "not_saved", "reason": "dry run"}))
        if not await self._store.replace(request.org_id, request.conversation_id, request.run_id, text):
            return ToolOutcome(call.id, call.name, "Not saved: this run has ended.", is_error=True)
        return ToolOutcome(call.id, call.name, "State note saved.")

    async def after_call(self, ctx: CallContext, call: ToolCallRequest, outcome: ToolOutcome) -> ToolOutcome:
        return outcome


@dataclass(frozen=True, slots=True)
class RunState:
    """What ``state_note`` adds to one run: its spec and its interceptor, or nothing."""

    specs: tuple[ToolSpec, ...] = ()
    interceptors: tuple[ToolInterceptor, ...] = field(default=())


def run_state(store: StateStore | None, subject: RunSubject, pii: Pseudonymizer, granted: Collection[str]) -> RunState:
    """The tool only when the runner keeps state, the run is granted it (the version's ``tool_ids``; not in
    plan mode, whose read-only filter drops it) and there is a conversation."""
    if store is None or subject.conversation is None or STATE_NOTE_TOOL not in granted:
        return RunState()
    return RunState((STATE_NOTE_SPEC,), (StateNoteTool(store, subject, pii),))


class StateNotePreload:
    """The note, read with the run's subject (services/runner/preload.py)."""

    key = STATE_NOTE_KEY
    sql = (
        "SELECT n.note FROM conversation_state_notes AS n"
        " WHERE n.org_id = :org_id AND n.conversation_id = :conversation_id"
    )

    def params(self, request: RunRequested) -> Mapping[str, Any]:
        return {}

    def parse(self, value: Any, subject: RunSubject) -> object:
        return MISSING if subject.conversation is None else value


def with_state(builders: Sequence[ContextBuilder], store: StateStore) -> list[ContextBuilder]:
    """``builders`` with the State layer right after the memory layers."""
    names = {b.name for b in builders}
    return insert_after(builders, "long_term_memory" if "long_term_memory" in names else "memory", StateLayer(store))
