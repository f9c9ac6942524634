"""Schema conventions checked on the metadata alone (no database needed)."""

from __future__ import annotations

import pytest
from sqlalchemy import CheckConstraint, DateTime, ForeignKeyConstraint, Index, UniqueConstraint
from sqlalchemy.orm import configure_mappers

from switchboard.db.base import ORG_ID_COLUMN, Base
from switchboard.db.enums import Role
from switchboard.db.models import ONE_ACTIVE_RUN_INDEX
from switchboard.db.tenancy import (
    GLOBAL_TABLES,
    LOOKUP_TABLES,
    ORG_TABLE,
    TENANT_TABLES,
    enable_rls_statements,
    tenant_key_column,
)

TABLES = Base.metadata.tables
# Columns holding a closed vocabulary: each needs a CHECK named after it.
ENUM_LIKE_COLUMNS = {
    "status",
    "role",
    "provider",
    "kind",
    "outcome",
    "mode",
    "severity",
    "scope",
    "direction",
    "sender",
    "vitality",
    "error_family",
    "wake_reason",
    "concurrency_policy",
    "validation_status",
    "delivery_status",
    "content_type",
    "autonomy_tier",
    "hard_action",
    "action_taken",
    "actor_kind",
    "pause_reason",
}


def test_every_table_is_either_tenant_or_global() -> None:
    assert not TENANT_TABLES & GLOBAL_TABLES
    assert set(TABLES) == TENANT_TABLES | GLOBAL_TABLES
    assert LOOKUP_TABLES <= TENANT_TABLES


def test_the_tenant_tables_of_spec_section_3_are_all_there() -> None:
    expected = {
        "organizations",
        "memberships",
        "api_tokens",
        "channel_sessions",
        "contacts",
        "conversations",
        "messages",
        "ai_agents",
        "ai_agent_versions",
        "ai_provider_credentials",
        "ai_agent_runs",
        "dispatch_decisions",
        "workspace_token_usage",
        "agent_decisions",
        "workspace_autonomy",
        "workspace_insights",
        "workspace_home_prefs",
        "budget_policies",
        "budget_incidents",
        "scheduled_followups",
        "audit_log",
    }
    assert expected <= TENANT_TABLES
    assert {"users", "ai_models", "outbox", "dispatch_rate_windows", "login_failures"} == GLOBAL_TABLES


@pytest.mark.parametrize("name", sorted(TENANT_TABLES - {ORG_TABLE}))
def test_tenant_tables_carry_a_cascading_non_null_org_id(name: str) -> None:
    column = TABLES[name].c[ORG_ID_COLUMN]
    assert not column.nullable
    [fk] = column.foreign_keys
    assert fk.target_fullname == "organizations.id" and fk.ondelete == "CASCADE"


@pytest.mark.parametrize("name", sorted(TENANT_TABLES))
def test_tenant_tables_have_an_index_leading_with_the_tenant_key(name: str) -> None:
    table = TABLES[name]
    key = tenant_key_column(name)
    candidates = [table.primary_key.columns, *(i.columns for i in table.indexes)]
    candidates += [c.columns for c in table.constraints if isinstance(c, UniqueConstraint)]
    leading = [next(iter(columns)).name for columns in candidates if len(columns)]
    assert key in leading, f"{name}: no index starts with {key}"


@pytest.mark.parametrize("name", sorted(TABLES))
def test_enum_like_columns_have_a_check(name: str) -> None:
    table = TABLES[name]
    checks = {c.name for c in table.constraints if isinstance(c, CheckConstraint)}
    for column in table.columns:
        if column.name in ENUM_LIKE_COLUMNS and str(column.type) == "TEXT":
            assert f"ck_{name}_{column.name}" in checks, f"{name}.{column.name} has no CHECK"


@pytest.mark.parametrize("name", sorted(TABLES))
def test_names_are_explicit_and_fit_postgres(name: str) -> None:
    table = TABLES[name]
    for item in [*table.constraints, *table.indexes]:
        if isinstance(item, ForeignKeyConstraint | CheckConstraint | UniqueConstraint | Index):
            assert item.name, f"{name}: unnamed {item!r}"
            assert len(str(item.name)) <= 63, item.name


@pytest.mark.parametrize("name", sorted(TABLES))
def test_timestamps_are_timezone_aware(name: str) -> None:
    for column in TABLES[name].columns:
        if isinstance(column.type, DateTime):
            assert column.type.timezone, f"{name}.{column.name}"


@pytest.mark.parametrize("name", sorted(TABLES))
def test_uuid_primary_keys_default_in_the_database(name: str) -> None:
    table = TABLES[name]
    # The queues (outbox, usage ledger) are ordered by a bigint sequence instead.
    if [c.name for c in table.primary_key.columns] == ["id"] and name not in {"outbox", "usage_entries"}:
        default = table.c.id.server_default
        assert default is not None and "gen_random_uuid()" in str(default.arg)  # type: ignore[attr-defined]


def test_relationships_never_lazy_load() -> None:
    configure_mappers()
    for mapper in Base.registry.mappers:
        for relationship in mapper.relationships:
            assert relationship.lazy == "raise", f"{mapper.class_.__name__}.{relationship.key}"


def test_one_active_run_index() -> None:
    [index] = [i for i in TABLES["ai_agent_runs"].indexes if i.name == ONE_ACTIVE_RUN_INDEX]
    assert index.unique and [c.name for c in index.columns] == ["conversation_id"]
    where = str(index.dialect_options["postgresql"]["where"])
    assert "'pending', 'running'" in where and "NOT is_dry_run" in where


def test_rls_statements_force_and_tolerate_an_unset_tenant() -> None:
    enable, force, policy = enable_rls_statements("contacts")
    assert enable.endswith("ENABLE ROW LEVEL SECURITY") and force.endswith("FORCE ROW LEVEL SECURITY")
    assert "NULLIF(current_setting('app.org_id', true), '')::uuid" in policy
    assert 'USING ("org_id" =' in policy and 'WITH CHECK ("org_id" =' in policy
    assert 'USING ("id" =' in enable_rls_statements("organizations")[2]
    with pytest.raises(ValueError):
        enable_rls_statements("contacts; DROP TABLE users")


def test_roles_are_ordered() -> None:
    assert Role.ADMIN.at_least(Role.MANAGER) and Role.MANAGER.at_least(Role.VIEWER)
    assert not Role.VIEWER.at_least(Role.MANAGER)
