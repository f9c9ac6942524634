"""Views and bodies of ``/api/v1/memory``."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator

from switchboard.db.models.memory import MAX_FACT_CHARS, normalized_fact


class FactView(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    scope: str = Field(description="`contact` (about one customer) or `org` (about the business)")
    contact_id: uuid.UUID | None
    fact: str
    source: str = Field(description="`tool` (an agent saved it) or `api` (a person did)")
    source_run_id: uuid.UUID | None
    conversation_id: uuid.UUID | None
    created_at: datetime
    updated_at: datetime


class NewFact(BaseModel):
    """A fact a person teaches the agents; without ``contact_id`` it is about the business."""

    model_config = ConfigDict(extra="forbid")

    fact: str = Field(
        min_length=1,
        max_length=MAX_FACT_CHARS * 2,
        description=f"at most {MAX_FACT_CHARS} characters once spaces are collapsed",
    )
    contact_id: uuid.UUID | None = None

    @field_validator("fact")
    @classmethod
    def _fact(cls, value: str) -> str:
        text, _ = normalized_fact(value)
        if not text:
            raise ValueError("fact must not be blank")
        if len(text) > MAX_FACT_CHARS:
            raise ValueError(f"fact must be at most {MAX_FACT_CHARS} characters: one short fact per entry")
        return text


class SummaryView(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    summary: str
    messages_covered: int = Field(description="how many of the conversation's messages it folds in")
    through_occurred_at: datetime = Field(description="the newest message it covers")
    revision: int
    provider: str
    model: str
    updated_at: datetime


class StateNoteView(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    note: str
    updated_by_run_id: uuid.UUID | None
    updated_at: datetime


class ConversationMemoryView(BaseModel):
    """What a run of this conversation is given besides its recent messages (docs/memory.md)."""

    conversation_id: uuid.UUID
    summary: SummaryView | None
    state_note: StateNoteView | None
