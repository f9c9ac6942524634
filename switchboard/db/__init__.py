"""Switchboard's database layer: models, migrations, tenant-scoped sessions.

- ``switchboard.db.models``   typed SQLAlchemy models, one module per domain
- ``switchboard.db.session``  engines and ``tenant_transaction`` (sets ``app.org_id``)
- ``switchboard.db.tenancy``  which tables are tenant tables; the RLS policy; checks
- ``switchboard.db.migrate``  ``upgrade(url)`` / ``downgrade(url)`` (Alembic, no ini file)
- ``switchboard.db.usage``    atomic monthly usage counters
- ``switchboard.db.insights`` idempotent insight upsert keeping the owner's status
- ``switchboard.db.lookups``  pre-tenant lookups (token, channel session, memberships)
- ``switchboard.db.audit``    audit entries with secrets redacted
- ``switchboard.db.outbox``   enqueue events in the caller's transaction

The migration module is not imported here, so services do not load Alembic.
"""

from switchboard.db.base import Base
from switchboard.db.insights import upsert_insight
from switchboard.db.session import (
    async_tenant_transaction,
    create_async_engine,
    create_async_sessionmaker,
    create_engine,
    create_sessionmaker,
    tenant_transaction,
)
from switchboard.db.tenancy import GLOBAL_TABLES, TENANT_TABLES
from switchboard.db.usage import record_usage

__all__ = [
    "GLOBAL_TABLES",
    "TENANT_TABLES",
    "Base",
    "async_tenant_transaction",
    "create_async_engine",
    "create_async_sessionmaker",
    "create_engine",
    "create_sessionmaker",
    "record_usage",
    "tenant_transaction",
    "upsert_insight",
]
