"""The platform's own provider key (``RUNNER_*_API_KEY``), used when neither the version nor the org has one."""

from __future__ import annotations

import pytest
from pydantic import SecretStr
from sqlalchemy.orm import Session

from services.runner.credentials import CredentialResolver
from services.runner.providers.base import CredentialSource
from switchboard.credentials import ProviderSettings
from switchboard.crypto import KeyRing
from switchboard.db.session import create_engine, tenant_transaction
from tests.support.api import create_org
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration


def test_a_platform_key_written_with_a_trailing_newline_is_used_without_it(
    stack: StackEndpoints, migrated: None
) -> None:
    """A Kubernetes Secret made from a file often ends in a newline: sent as is, the SDK's HTTP
    client refused the header (its error quoting the key), every attempt was retried as a
    connection failure and the run failed as "provider unreachable"."""
    org = create_org(stack.database_url)
    resolver = CredentialResolver(
        keyring=KeyRing.from_settings(),
        platform_keys={"anthropic": SecretStr("sk-ant-platform-key\n")},
        provider_settings=ProviderSettings(),
    )
    engine = create_engine(stack.database_url, pool_size=1)
    try:
        with Session(engine) as session, tenant_transaction(session, org.org_id):
            access = resolver.resolve(
                session, org_id=org.org_id, provider="anthropic", version_credential_id=None, requires_key=True
            )
    finally:
        engine.dispose()
    assert access.source is CredentialSource.PLATFORM
    assert access.api_key == "sk-ant-platform-key"
