"""The API behind a transaction pooler (PgBouncer ``pool_mode = transaction``), as docs/deploy.md allows.

psycopg prepares a statement on the server once a connection ran it five times; a pooler that
does not track prepared statements (PgBouncer before 1.21, Debian's 1.18 here) hands the next
run to another server session, where the statement does not exist. ``DATABASE_PREPARED_STATEMENTS
=false`` is the switch for such a pooler: the API must then answer every request through it.
"""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy.engine import make_url

from switchboard.settings import KafkaSettings
from tests.support.api import create_org
from tests.support.live_api import live_api
from tests.support.pgbouncer import pgbouncer
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration


def test_with_prepared_statements_off_every_request_through_an_old_transaction_pooler_is_answered(
    stack: StackEndpoints, migrated: None, kafka_settings: KafkaSettings
) -> None:
    org = create_org(stack.database_url, name="Pooler Org")
    headers = {"Authorization": f"Bearer {org.admin_token}"}
    with (
        pgbouncer(make_url(stack.database_url), pool_mode="transaction", pool_size=3) as pooled,
        live_api(
            stack,
            kafka_settings,
            DATABASE_URL=pooled.render_as_string(hide_password=False),
            DATABASE_PREPARED_STATEMENTS="false",
            API_OUTBOX_RELAY="false",
        ) as url,
        httpx.Client(base_url=url, headers=headers, timeout=10) as client,
    ):
        # Every request repeats the same statements (token, tenant, list): far past the five runs
        # after which psycopg would prepare them, on connections the pooler shuffles between servers.
        statuses = [client.get(path).status_code for _ in range(15) for path in ("/api/v1/agents", "/api/v1/auth/me")]
        created = client.post("/api/v1/home/todos", json={"text": "ligar para o fornecedor"})
        done = client.post(f"/api/v1/home/todos/{created.json()['data']['id']}:done")
    assert statuses == [200] * 30
    assert created.status_code == 201, created.text
    assert done.status_code == 200, done.text
