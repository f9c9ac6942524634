"""Agents, versions, channels and credentials for API tests (shared by several test modules)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session

from switchboard.db.models.agents import AiProviderCredential
from switchboard.db.models.audit import AuditLogEntry
from switchboard.db.models.channels import ChannelSession
from switchboard.db.session import create_engine, set_tenant
from tests.support.api import OrgHandle


@contextmanager
def tenant_session(org: OrgHandle) -> Iterator[Session]:
    """A sync session of the application role scoped to ``org`` (committed on exit)."""
    engine = create_engine(org.database_url, pool_size=1)
    try:
        with Session(engine, expire_on_commit=False) as session, session.begin():
            set_tenant(session, org.org_id)
            yield session
    finally:
        engine.dispose()


def make_channel(org: OrgHandle, *, status: str = "working") -> uuid.UUID:
    """A WhatsApp session row (the channels API is not what these tests are about)."""
    with tenant_session(org) as session:
        channel = ChannelSession(
            org_id=org.org_id,
            external_session=f"s-{uuid.uuid4().hex[:12]}",
            label="Main number",
            status=status,
        )
        session.add(channel)
        session.flush()
        return channel.id


def make_credential(
    org: OrgHandle, *, provider: str = "anthropic", active: bool = True, base_url: str | None = None
) -> uuid.UUID:
    with tenant_session(org) as session:
        row = AiProviderCredential(
            org_id=org.org_id,
            provider=provider,
            base_url=base_url,
            label=f"key {uuid.uuid4().hex[:6]}",
            ciphertext=os.urandom(40),
            iv=os.urandom(12),
            tag=os.urandom(16),
            key_id="k1",
            last4="abcd",
            is_active=active,
        )
        session.add(row)
        session.flush()
        return row.id


def version_body(channel_id: uuid.UUID | None, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "system_prompt": "Você é o assistente de pré-venda da loja.",
        "provider": "anthropic",
        "model": "claude-sonnet-4-6",
        "tool_ids": ["crm_search_contacts", "crm_request_human_handoff"],
        "trigger_config": {"event_types": ["message"], "ignore_groups": True},
        "channel_session_id": None if channel_id is None else str(channel_id),
        "max_steps": 8,
        "token_budget": 40_000,
        "cost_budget_cents": 25,
    }
    body.update(overrides)
    return body


async def create_agent(
    client: httpx.AsyncClient, org: OrgHandle, channel_id: uuid.UUID | None, **version: Any
) -> dict[str, Any]:
    response = await client.post(
        "/api/v1/agents",
        json={"name": "Suporte Pré-venda", "priority": 10, "version": version_body(channel_id, **version)},
        headers=org.headers(),
    )
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


async def save_draft(
    client: httpx.AsyncClient, org: OrgHandle, agent_id: str, channel_id: uuid.UUID | None, **version: Any
) -> dict[str, Any]:
    response = await client.post(
        f"/api/v1/agents/{agent_id}/versions", json=version_body(channel_id, **version), headers=org.headers()
    )
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


def audit_actions(org: OrgHandle, target_id: str) -> list[str]:
    with tenant_session(org) as session:
        rows = session.scalars(
            select(AuditLogEntry)
            .where(AuditLogEntry.org_id == org.org_id, AuditLogEntry.target_id == target_id)
            .order_by(AuditLogEntry.created_at, AuditLogEntry.id)
        )
        return [r.action for r in rows]


def error_body(response: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = response.json()["error"]
    return body
