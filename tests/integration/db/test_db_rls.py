"""Tenant isolation, proven on a real PostgreSQL for every tenant table (not a sample)."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from sqlalchemy import CursorResult, insert, text
from sqlalchemy.exc import DBAPIError, ProgrammingError

from switchboard.db import lookups
from switchboard.db.base import Base
from switchboard.db.models import ApiToken, AuditLogEntry, Membership, ScheduledFollowup
from switchboard.db.session import tenant_transaction
from switchboard.db.tenancy import (
    GLOBAL_TABLES,
    LOOKUP_TABLES,
    OWNER_LOOKUP_POLICY,
    TENANT_POLICY,
    TENANT_TABLES,
    rls_problems,
    tenant_key_column,
)

from .conftest import MigratedDatabase
from .factories import ROW_BUILDERS, create_channel_session, create_row, create_user, row_values

pytestmark = pytest.mark.integration

# Tables the application role may not UPDATE or DELETE (append-only by grant).
APPEND_ONLY = {"audit_log"}
RLS_VIOLATION = "42501"  # insufficient_privilege: "new row violates row-level security policy"


def _sqlstate(exc: DBAPIError) -> str | None:
    return getattr(exc.orig, "sqlstate", None)


def test_every_tenant_table_has_a_row_factory() -> None:
    assert set(ROW_BUILDERS) == set(TENANT_TABLES)


def test_rls_enabled_and_forced_exactly_on_tenant_tables(db: MigratedDatabase) -> None:
    with db.owner_engine.connect() as conn:
        forced = set(
            conn.execute(
                text(
                    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE n.nspname = 'public' AND c.relkind = 'r'"
                    " AND c.relrowsecurity AND c.relforcerowsecurity"
                )
            ).scalars()
        )
        assert forced == set(TENANT_TABLES)

        policies = conn.execute(
            text(
                "SELECT tablename, policyname, permissive, roles, cmd, qual, with_check"
                " FROM pg_policies WHERE schemaname = 'public'"
            )
        ).all()
        tenant = [p for p in policies if p.policyname == TENANT_POLICY]
        assert {p.tablename for p in tenant} == set(TENANT_TABLES)
        for policy in tenant:
            key = tenant_key_column(policy.tablename)
            assert policy.cmd == "ALL" and policy.permissive == "PERMISSIVE", policy
            assert list(policy.roles) == ["public"], policy
            for clause in (policy.qual, policy.with_check):
                assert "app.org_id" in clause and key in clause, policy

        lookup = [p for p in policies if p.policyname == OWNER_LOOKUP_POLICY]
        assert {p.tablename for p in lookup} == set(LOOKUP_TABLES)
        for policy in lookup:
            assert policy.cmd == "SELECT" and list(policy.roles) == [db.owner_role], policy

        assert {p.policyname for p in policies} == {TENANT_POLICY, OWNER_LOOKUP_POLICY}
        assert not set(GLOBAL_TABLES) & {p.tablename for p in policies}
        assert rls_problems(conn) == []


def test_app_role_cannot_bypass_rls(db: MigratedDatabase) -> None:
    with db.owner_engine.connect() as conn:
        role = conn.execute(
            text("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = :r"), {"r": db.app_role}
        ).one()
        assert (role.rolsuper, role.rolbypassrls) == (False, False)
        owned = conn.execute(
            text(
                "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = 'public' AND pg_get_userbyid(c.relowner) = :r"
            ),
            {"r": db.app_role},
        ).scalar_one()
        assert owned == 0
        # Not a member of the owner role either, so it cannot SET ROLE its way around.
        assert not conn.execute(
            text("SELECT pg_has_role(:app, :owner, 'MEMBER')"), {"app": db.app_role, "owner": db.owner_role}
        ).scalar_one()

    with db.app_engine.connect() as conn, pytest.raises(ProgrammingError) as exc:
        conn.execute(text("ALTER TABLE ai_agent_runs DISABLE ROW LEVEL SECURITY"))
    assert _sqlstate(exc.value) == RLS_VIOLATION  # "must be owner of table"


@pytest.mark.parametrize("table", sorted(TENANT_TABLES))
def test_app_role_sees_and_changes_only_its_org(db: MigratedDatabase, table: str) -> None:
    org_a, org_b = db.new_org(), db.new_org()
    if table != "organizations":
        for org in (org_a, org_b):
            with db.owner_session() as session, tenant_transaction(session, org):
                create_row(session, table, org)
    key = tenant_key_column(table)

    with db.app_session() as session, tenant_transaction(session, org_a):
        visible = set(session.execute(text(f"SELECT {key} FROM {table}")).scalars())
        assert visible == {org_a}
        filtered = session.execute(text(f"SELECT count(*) FROM {table} WHERE {key} = :b"), {"b": org_b}).scalar_one()
        assert filtered == 0
        if table not in APPEND_ONLY:

            def rowcount(statement: str) -> int:
                result = cast("CursorResult[Any]", session.execute(text(statement), {"b": org_b}))
                return result.rowcount

            updated = rowcount(f"UPDATE {table} SET {key} = {key} WHERE {key} = :b")
            deleted = rowcount(f"DELETE FROM {table} WHERE {key} = :b")
            assert (updated, deleted) == (0, 0)

    # No tenant stated: nothing at all, never everything.
    with db.app_session() as session, session.begin():
        assert session.execute(text(f"SELECT count(*) FROM {table}")).scalar_one() == 0

    # The owner still sees org B's row: the app role saw nothing because of RLS, not luck.
    with db.owner_session() as session, tenant_transaction(session, org_b):
        assert session.execute(text(f"SELECT count(*) FROM {table} WHERE {key} = :b"), {"b": org_b}).scalar_one() >= 1


@pytest.mark.parametrize("table", sorted(TENANT_TABLES))
def test_app_role_cannot_insert_for_another_org(db: MigratedDatabase, table: str) -> None:
    org_a, org_b = db.new_org(), db.new_org()
    # Org B's dependencies exist (created as the owner, scoped to B); only the row is left.
    with db.owner_session() as session, tenant_transaction(session, org_b):
        target = uuid.uuid4() if table == "organizations" else org_b
        row = ROW_BUILDERS[table](session, target)
        values = row_values(row)
        model_table = Base.metadata.tables[table]

    with db.app_session() as session, tenant_transaction(session, org_a), pytest.raises(DBAPIError) as exc:
        session.execute(insert(model_table).values(**values))
    assert _sqlstate(exc.value) == RLS_VIOLATION
    assert "row-level security" in str(exc.value.orig)


@pytest.mark.parametrize("table", sorted(TENANT_TABLES - {"organizations"} - APPEND_ONLY))
def test_app_role_cannot_move_a_row_to_another_org(db: MigratedDatabase, table: str) -> None:
    org_a, org_b = db.new_org(), db.new_org()
    with db.app_session() as session, tenant_transaction(session, org_a):
        create_row(session, table, org_a)
    with db.app_session() as session, tenant_transaction(session, org_a), pytest.raises(DBAPIError) as exc:
        session.execute(text(f"UPDATE {table} SET org_id = :b"), {"b": org_b})
    assert _sqlstate(exc.value) == RLS_VIOLATION


def test_audit_log_is_append_only_for_the_app_role(db: MigratedDatabase, org_a: uuid.UUID) -> None:
    with db.app_session() as session, tenant_transaction(session, org_a):
        create_row(session, "audit_log", org_a)
    for statement in ("UPDATE audit_log SET action = 'x.y'", "DELETE FROM audit_log"):
        with db.app_session() as session, tenant_transaction(session, org_a), pytest.raises(ProgrammingError) as exc:
            session.execute(text(statement))
        assert "permission denied" in str(exc.value.orig)
    with db.app_session() as session, tenant_transaction(session, org_a):
        assert session.query(AuditLogEntry).count() == 1


def test_model_catalog_is_read_only_for_the_app_role(db: MigratedDatabase) -> None:
    with db.app_session() as session, session.begin():
        assert session.execute(text("SELECT count(*) FROM ai_models")).scalar_one() > 0
    with db.app_session() as session, session.begin(), pytest.raises(ProgrammingError) as exc:
        session.execute(text("UPDATE ai_models SET input_price_micros_per_mtok = 0"))
    assert "permission denied" in str(exc.value.orig)


class TestLookups:
    """The SECURITY DEFINER functions answer pre-tenant questions for the app role, narrowly."""

    def test_api_token_lookup(self, db: MigratedDatabase, org_b: uuid.UUID) -> None:
        token = f"sbk_{uuid.uuid4().hex}"
        with db.owner_session() as session, tenant_transaction(session, org_b):
            row = ApiToken(
                org_id=org_b,
                name="ci",
                token_prefix=token[:8],
                token_hash=lookups.hash_api_token(token),
                role="manager",
            )
            revoked = ApiToken(
                org_id=org_b,
                name="old",
                token_prefix="sbk_old",
                token_hash=hashlib.sha256(b"old").digest(),
                role="admin",
                revoked_at=datetime.now(UTC),
            )
            session.add_all([row, revoked])

        with db.app_session() as session, session.begin():
            # The table itself stays invisible without a tenant...
            assert session.execute(text("SELECT count(*) FROM api_tokens")).scalar_one() == 0
            # ...but the exact hash resolves to its org.
            found = lookups.lookup_api_token(session, lookups.hash_api_token(token))
            assert found is not None
            assert (found.token_id, found.org_id, found.role) == (row.id, org_b, "manager")
            assert lookups.lookup_api_token(session, hashlib.sha256(b"old").digest()) is None
            assert lookups.lookup_api_token(session, hashlib.sha256(b"nope").digest()) is None

    def test_membership_channel_session_org_and_followup_lookups(
        self, db: MigratedDatabase, org_a: uuid.UUID, org_b: uuid.UUID
    ) -> None:
        with db.owner_session() as session, session.begin():
            user = create_user(session)
        for org in (org_a, org_b):
            with db.owner_session() as session, tenant_transaction(session, org):
                session.add(Membership(org_id=org, user_id=user.id, role="viewer"))
        with db.owner_session() as session, tenant_transaction(session, org_b):
            channel = create_channel_session(session, org_b)
            followup = create_row(session, "scheduled_followups", org_b)
            assert isinstance(followup, ScheduledFollowup)

        with db.app_session() as session, session.begin():
            memberships = lookups.lookup_user_memberships(session, user.id)
            assert {m.org_id for m in memberships} == {org_a, org_b}
            route = lookups.lookup_channel_session(session, "waha", channel.external_session)
            assert route is not None and (route.org_id, route.channel_session_id) == (org_b, channel.id)
            assert lookups.lookup_channel_session(session, "waha", "unknown-session") is None
            by_id = lookups.lookup_channel_session_by_id(session, "waha", channel.id)
            assert by_id is not None and by_id[0] == route and by_id[1] == channel.external_session
            assert lookups.lookup_channel_session_by_id(session, "waha", uuid.uuid4()) is None
            org_ids = lookups.list_organization_ids(session)
            assert {org_a, org_b} <= set(org_ids)
            due = lookups.list_due_followups(session, datetime.now(UTC) + timedelta(days=2), limit=1000)
            assert (followup.id, org_b) in {(d.followup_id, d.org_id) for d in due}
            assert followup.id not in {d.followup_id for d in lookups.list_due_followups(session, datetime.now(UTC))}
