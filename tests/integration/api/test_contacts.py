"""Contacts over HTTP: find the org's customers, read one, correct the name, phone or e-mail the
channel gave — and the inbox shows who each conversation is with."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import select

from switchboard.db.enums import Role
from switchboard.db.models.audit import AuditLogEntry
from switchboard.db.models.channels import Contact
from tests.integration.brief.scene import Scene, make_scene
from tests.support.agents import tenant_session
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 30, 9, tzinfo=UTC)


def _contact(scene: Scene, *, name: str | None, phone: str | None, minutes: int) -> uuid.UUID:
    with tenant_session(scene.org) as session:
        contact = Contact(
            org_id=scene.org_id,
            external_id=f"55{uuid.uuid4().int % 10**11:011d}@c.us",
            display_name=name,
            phone_number=phone,
            created_at=T0 + timedelta(minutes=minutes),
        )
        session.add(contact)
        session.flush()
        return contact.id


def _audited(scene: Scene, contact_id: uuid.UUID) -> list[dict[str, object]]:
    with tenant_session(scene.org) as session:
        rows = session.scalars(
            select(AuditLogEntry)
            .where(AuditLogEntry.action == "contact.updated", AuditLogEntry.target_id == str(contact_id))
            .order_by(AuditLogEntry.created_at)
        )
        return [dict(r.details) for r in rows]


async def test_contacts_are_listed_searched_and_paged_within_the_org(
    client: httpx.AsyncClient, stack: StackEndpoints
) -> None:
    scene, other = make_scene(stack.database_url), make_scene(stack.database_url)
    ana = _contact(scene, name="Ana Souza", phone="+5511987654321", minutes=1)
    bruno = _contact(scene, name="Bruno 100%", phone=None, minutes=2)
    _contact(other, name="Ana Other", phone=None, minutes=3)
    manager = scene.org.headers(Role.MANAGER)

    first = await client.get("/api/v1/contacts", params={"limit": 2}, headers=manager)
    assert first.status_code == 200, first.text
    rest = await client.get(
        "/api/v1/contacts", params={"limit": 2, "cursor": first.json()["next_cursor"]}, headers=manager
    )
    listed = [c["id"] for c in first.json()["data"] + rest.json()["data"]]
    assert listed == [str(scene.contact_id), str(bruno), str(ana)]  # the scene's own was created now
    assert rest.json()["next_cursor"] is None

    async def search(q: str) -> list[str]:
        found = await client.get("/api/v1/contacts", params={"q": q}, headers=manager)
        assert found.status_code == 200, found.text
        return [c["id"] for c in found.json()["data"]]

    assert await search("ana") == [str(ana)], "any case; never another org's Ana"
    assert await search("98765") == [str(ana)]
    assert await search("100%") == [str(bruno)]
    assert await search("%") == [str(bruno)], "% is a character, not a wildcard"

    missing = await client.get(f"/api/v1/contacts/{uuid.uuid4()}", headers=manager)
    foreign = await client.get(f"/api/v1/contacts/{_contact(other, name='X', phone=None, minutes=4)}", headers=manager)
    assert missing.status_code == foreign.status_code == 404
    assert foreign.json()["error"]["code"] == "not_found"


async def test_a_contact_is_corrected_audited_by_field_and_shown_in_the_inbox(
    client: httpx.AsyncClient, stack: StackEndpoints
) -> None:
    scene = make_scene(stack.database_url)
    manager = scene.org.headers(Role.MANAGER)
    path = f"/api/v1/contacts/{scene.contact_id}"

    for body in (
        {"phone_number": "11 98765-4321"},
        {"email": "ana.gmail.com"},
        {"display_name": "   "},
        {"display_name": None},  # ingest would fill it again from the WhatsApp profile
        {"nickname": "Aninha"},
    ):
        refused = await client.patch(path, json=body, headers=manager)
        assert refused.status_code == 422, (body, refused.text)
        assert refused.json()["error"]["code"] == "validation_error"

    changed = await client.patch(
        path, json={"display_name": "  Ana Maria Souza ", "email": "ana@example.com"}, headers=manager
    )
    assert changed.status_code == 200, changed.text
    view = changed.json()["data"]
    assert (view["display_name"], view["email"], view["phone_number"]) == ("Ana Maria Souza", "ana@example.com", None)
    same = await client.patch(path, json={"display_name": "Ana Maria Souza"}, headers=manager)
    cleared = await client.patch(path, json={"email": None, "phone_number": "+5511987654321"}, headers=manager)
    assert same.status_code == cleared.status_code == 200
    assert (cleared.json()["data"]["email"], cleared.json()["data"]["phone_number"]) == (None, "+5511987654321")
    # Which fields changed, never their values; a PATCH that changes nothing leaves no entry.
    assert _audited(scene, scene.contact_id) == [
        {"fields": ["display_name", "email"]},
        {"fields": ["email", "phone_number"]},
    ]

    conversation = await client.get(f"/api/v1/conversations/{scene.conversation_id}", headers=manager)
    assert conversation.json()["data"]["contact"] == {
        "id": str(scene.contact_id),
        "display_name": "Ana Maria Souza",
        "phone_number": "+5511987654321",
    }
    inbox = await client.get("/api/v1/conversations", headers=manager)
    [listed] = [c for c in inbox.json()["data"] if c["id"] == str(scene.conversation_id)]
    assert listed["contact"]["display_name"] == "Ana Maria Souza"
