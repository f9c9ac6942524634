"""Request and response bodies of the contact endpoints."""

from __future__ import annotations

import re
import uuid
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator

from switchboard.db.models.channels import E164_PATTERN

# The database's own check on phone numbers (contacts.phone_e164): E.164 with the plus.
E164 = re.compile(E164_PATTERN)
# Enough to catch a typo ("ana.gmail.com"); deliverability is not ours to prove.
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


class ContactSummary(BaseModel):
    """Who a conversation is with, as the inbox shows it."""

    id: uuid.UUID
    display_name: str | None
    phone_number: str | None


class ContactView(ContactSummary):
    external_id: str = Field(description="The channel's id of the person (WhatsApp: `5511999999999@c.us`)")
    email: str | None
    erased_at: datetime | None = Field(description="When the contact's personal data was erased; null: never")
    created_at: datetime
    updated_at: datetime


class UpdateContact(BaseModel):
    """Fields to change; a field left out is kept, `null` clears it (not the name: ingest would
    fill an empty name again from the customer's WhatsApp profile)."""

    model_config = ConfigDict(extra="forbid")

    display_name: str | None = Field(default=None, max_length=200)
    phone_number: str | None = Field(default=None, description="E.164, e.g. `+5511999999999`")
    email: str | None = Field(default=None, max_length=320)

    @field_validator("display_name")
    @classmethod
    def _name_not_blank(cls, value: str | None) -> str | None:
        if value is None:
            raise ValueError("display_name cannot be cleared (the channel would fill it again); correct it instead")
        stripped = value.strip()
        if not stripped:
            raise ValueError("display_name must not be blank")
        return stripped

    @field_validator("phone_number")
    @classmethod
    def _e164(cls, value: str | None) -> str | None:
        if value is not None and not E164.fullmatch(value):
            raise ValueError("phone_number must be E.164, e.g. +5511999999999")
        return value

    @field_validator("email")
    @classmethod
    def _email(cls, value: str | None) -> str | None:
        if value is None:
            return None
        stripped = value.strip()
        if not EMAIL.fullmatch(stripped):
            raise ValueError("email must look like name@example.com")
        return stripped
