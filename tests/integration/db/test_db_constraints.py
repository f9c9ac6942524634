"""The invariants PostgreSQL enforces itself, as seen by the application role."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime

import pytest
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from switchboard.db.models import (
    ONE_ACTIVE_RUN_INDEX,
    AiAgentVersion,
    AiModel,
    AiProviderCredential,
    Membership,
    WorkspaceTokenUsage,
)
from switchboard.db.session import tenant_transaction

from .conftest import MigratedDatabase
from .factories import (
    build_ai_agent_versions,
    build_ai_provider_credentials,
    create_agent_version,
    create_conversation,
    create_message,
    create_run,
    create_user,
)

pytestmark = pytest.mark.integration


def _violates(db: MigratedDatabase, org: uuid.UUID, action: Callable[[Session], object], constraint: str) -> None:
    """Run ``action`` in its own tenant transaction and expect ``constraint`` to refuse it."""
    with db.app_session() as session, pytest.raises(IntegrityError) as exc, tenant_transaction(session, org):
        action(session)
        session.flush()
    assert exc.value.orig is not None
    assert exc.value.orig.diag.constraint_name == constraint  # type: ignore[attr-defined]


class TestOneActiveRunPerConversation:
    def test_second_running_run_in_the_same_conversation_is_refused(
        self, db: MigratedDatabase, org_a: uuid.UUID
    ) -> None:
        with db.app_session() as session, tenant_transaction(session, org_a):
            version = create_agent_version(session, org_a)
            conversation = create_conversation(session, org_a)
            create_run(session, org_a, version=version, conversation=conversation, status="running")

        def second(session: Session) -> None:
            create_run(session, org_a, version=version, conversation=conversation, status="running")

        _violates(db, org_a, second, ONE_ACTIVE_RUN_INDEX)

        def pending(session: Session) -> None:
            create_run(session, org_a, version=version, conversation=conversation, status="pending")

        _violates(db, org_a, pending, ONE_ACTIVE_RUN_INDEX)

    def test_running_runs_in_other_conversations_and_finished_runs_are_fine(
        self, db: MigratedDatabase, org_a: uuid.UUID
    ) -> None:
        with db.app_session() as session, tenant_transaction(session, org_a):
            version = create_agent_version(session, org_a)
            first, second = create_conversation(session, org_a), create_conversation(session, org_a)
            create_run(session, org_a, version=version, conversation=first, status="running")
            create_run(session, org_a, version=version, conversation=second, status="running")
            # A completed run and a running one in the same conversation.
            create_run(session, org_a, version=version, conversation=second, status="completed")
            create_run(session, org_a, version=version, conversation=second, status="failed")
            # Dry runs (test mode) never block a live conversation.
            create_run(session, org_a, version=version, conversation=first, status="running", is_dry_run=True)
            # Runs without a conversation (scheduled analysis) are not constrained.
            create_run(session, org_a, version=version, conversation=None, status="running")
            create_run(session, org_a, version=version, conversation=None, status="running")

    def test_a_finished_run_frees_the_conversation(self, db: MigratedDatabase, org_a: uuid.UUID) -> None:
        with db.app_session() as session, tenant_transaction(session, org_a):
            version = create_agent_version(session, org_a)
            conversation = create_conversation(session, org_a)
            run = create_run(session, org_a, version=version, conversation=conversation, status="running")
            run.status = "completed"
            session.flush()
            create_run(session, org_a, version=version, conversation=conversation, status="running")


class TestMessages:
    def test_duplicate_external_id_in_a_session_is_refused(self, db: MigratedDatabase, org_a: uuid.UUID) -> None:
        with db.app_session() as session, tenant_transaction(session, org_a):
            message = create_message(session, org_a)
            conversation_id, channel_id, external_id = (
                message.conversation_id,
                message.channel_session_id,
                message.external_id,
            )

        def duplicate(session: Session) -> None:
            create_message(
                session,
                org_a,
                conversation_id=conversation_id,
                channel_session_id=channel_id,
                external_id=external_id,
            )

        _violates(db, org_a, duplicate, "uq_messages_channel_session_id_external_id")

    def test_same_external_id_on_another_session_and_null_ids_are_fine(
        self, db: MigratedDatabase, org_a: uuid.UUID
    ) -> None:
        with db.app_session() as session, tenant_transaction(session, org_a):
            first = create_message(session, org_a, external_id="wamid.same")
            create_message(session, org_a, external_id="wamid.same")  # another conversation and session
            for _ in range(2):  # outbound messages not yet accepted by the channel
                create_message(
                    session,
                    org_a,
                    conversation_id=first.conversation_id,
                    channel_session_id=first.channel_session_id,
                    external_id=None,
                    direction="outbound",
                    sender="agent",
                    delivery_status="pending",
                )


class TestChecks:
    @pytest.mark.parametrize("max_steps", [0, 26])
    def test_max_steps_outside_1_to_25_is_refused(self, db: MigratedDatabase, org_a: uuid.UUID, max_steps: int) -> None:
        def version(session: Session) -> None:
            row = build_ai_agent_versions(session, org_a)
            row.max_steps = max_steps
            session.add(row)

        _violates(db, org_a, version, "ck_ai_agent_versions_max_steps_range")

    def test_max_steps_bounds_are_accepted(self, db: MigratedDatabase, org_a: uuid.UUID) -> None:
        with db.app_session() as session, tenant_transaction(session, org_a):
            for steps in (1, 25):
                row = build_ai_agent_versions(session, org_a)
                row.max_steps = steps
                session.add(row)

    def test_unknown_role_is_refused(self, db: MigratedDatabase, org_a: uuid.UUID) -> None:
        with db.owner_session() as session, session.begin():
            user_id = create_user(session).id
        _violates(
            db, org_a, lambda s: s.add(Membership(org_id=org_a, user_id=user_id, role="owner")), "ck_memberships_role"
        )

    def test_credential_iv_must_be_12_bytes(self, db: MigratedDatabase, org_a: uuid.UUID) -> None:
        def credential(session: Session) -> None:
            row = build_ai_provider_credentials(session, org_a)
            row.iv = os.urandom(16)
            session.add(row)

        _violates(db, org_a, credential, "ck_ai_provider_credentials_iv_length")

    def test_negative_usage_is_refused(self, db: MigratedDatabase, org_a: uuid.UUID) -> None:
        _violates(
            db,
            org_a,
            lambda s: s.add(WorkspaceTokenUsage(org_id=org_a, month=date(2026, 2, 1), input_tokens=-1)),
            "ck_workspace_token_usage_input_tokens_non_negative",
        )

    def test_one_published_version_per_agent(self, db: MigratedDatabase, org_a: uuid.UUID) -> None:
        with db.app_session() as session, tenant_transaction(session, org_a):
            first = create_agent_version(session, org_a)
            first.status = "published"
            first.published_at = datetime.now(UTC)
            agent_id, channel_id = first.agent_id, first.channel_session_id

        def second(session: Session) -> None:
            session.add(
                AiAgentVersion(
                    org_id=org_a,
                    agent_id=agent_id,
                    version_number=2,
                    system_prompt="v2",
                    provider="anthropic",
                    model="claude-sonnet-4-6",
                    channel_session_id=channel_id,
                    status="published",
                    published_at=datetime.now(UTC),
                )
            )

        _violates(db, org_a, second, "uq_ai_agent_versions_one_published_per_agent")

    def test_one_default_credential_per_provider(self, db: MigratedDatabase, org_a: uuid.UUID) -> None:
        def two_defaults(session: Session) -> None:
            for _ in range(2):
                row: AiProviderCredential = build_ai_provider_credentials(session, org_a)
                row.is_default = True
                session.add(row)
                session.flush()

        _violates(db, org_a, two_defaults, "uq_ai_provider_credentials_one_default_per_provider")

    def test_model_catalog_has_one_default_per_provider(self, db: MigratedDatabase) -> None:
        with db.owner_session() as session, pytest.raises(IntegrityError) as exc, session.begin():
            session.add(
                AiModel(provider="anthropic", model=f"x-{uuid.uuid4().hex[:6]}", display_name="X", is_default=True)
            )
            session.flush()
        assert exc.value.orig.diag.constraint_name == "uq_ai_models_one_default_per_provider"  # type: ignore[union-attr]
        with db.owner_session() as session, pytest.raises(IntegrityError) as exc, session.begin():
            session.add(AiModel(provider="anthropic", model="claude-sonnet-4-6", display_name="dup"))
            session.flush()
        assert exc.value.orig.diag.constraint_name == "uq_ai_models_provider_model"  # type: ignore[union-attr]
