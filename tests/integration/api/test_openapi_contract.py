"""The OpenAPI document is the contract: every operation is documented, protected, and never 5xx.

- every non-public operation refuses a missing or wrong token with 401 ``unauthorized``;
- every operation documents its error responses;
- schemathesis generates requests from ``/openapi.json`` and, with an admin token,
  no response is a 5xx (bounded example count).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from services.brief.catalog import load_catalog
from switchboard.settings import KafkaSettings
from tests.support.api import OrgHandle, create_org
from tests.support.live_api import live_api
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration

# Operations that are public on purpose: they authenticate by other means.
PUBLIC_OPERATIONS = {
    ("POST", "/api/v1/auth/login"),  # credentials in the body
    ("POST", "/api/v1/webhooks/waha"),  # HMAC signature of the channel session
    ("POST", "/api/v1/webhooks/waha/{channel_session_id}"),  # the same, routed by the URL
}


@pytest.fixture(scope="module")
def api_url(stack: StackEndpoints, migrated: None) -> Iterator[str]:
    kafka = KafkaSettings(bootstrap_servers=stack.kafka_bootstrap_servers, topic_prefix=f"oa{uuid.uuid4().hex[:8]}.")
    with live_api(stack, kafka, API_OUTBOX_RELAY="false") as url:
        yield url


@pytest.fixture(scope="module")
def admin(stack: StackEndpoints, migrated: None) -> OrgHandle:
    return create_org(stack.database_url, name="Schemathesis Org")


@pytest.fixture(scope="module")
def openapi(api_url: str) -> dict[str, Any]:
    return httpx.get(f"{api_url}/openapi.json", timeout=10).json()


def _operations(openapi: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (method.upper(), path)
        for path, item in openapi["paths"].items()
        for method in item
        if method in {"get", "post", "put", "patch", "delete"}
    ]


def test_every_operation_documents_its_errors(openapi: dict[str, Any]) -> None:
    undocumented = [
        f"{method} {path}"
        for method, path in _operations(openapi)
        if not any(code.startswith("4") for code in openapi["paths"][path][method.lower()].get("responses", {}))
    ]
    assert not undocumented, f"operations without documented 4xx errors: {undocumented}"


def test_every_home_card_link_is_an_operation(openapi: dict[str, Any]) -> None:
    """The Home digest's approve/ignore links (services/brief/digest.yaml) are POST operations here."""
    placeholder = re.compile(r"\{[^}]+\}")
    posts = {placeholder.sub("{}", path) for method, path in _operations(openapi) if method == "POST"}
    links = [link for kind in load_catalog().links.values() for link in (kind.approve, kind.ignore)]
    assert links
    dangling = [link for link in links if placeholder.sub("{}", link) not in posts]
    assert not dangling, f"Home card links without an operation: {dangling}"


def test_every_private_operation_refuses_missing_and_wrong_tokens(api_url: str, openapi: dict[str, Any]) -> None:
    checked = 0
    for method, path in _operations(openapi):
        if (method, path) in PUBLIC_OPERATIONS:
            continue
        concrete = re.sub(r"\{[^}]+\}", str(uuid.uuid4()), path)
        for headers in ({}, {"Authorization": "Bearer sbt_wrong"}, {"Authorization": "Token nope"}):
            response = httpx.request(method, f"{api_url}{concrete}", headers=headers, json={}, timeout=10)
            assert response.status_code == 401, f"{method} {path} with {headers or 'no token'}: {response.status_code}"
            assert response.json()["error"]["code"] == "unauthorized"
        checked += 1
    assert checked >= 5, "the API should have protected operations"


def test_no_generated_request_gets_a_server_error(api_url: str, admin: OrgHandle) -> None:
    """Schemathesis' generated requests (bounded per operation), with an admin token: never a 5xx."""
    schema = schemathesis.openapi.from_url(f"{api_url}/openapi.json")
    failures: list[str] = []
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1

        @given(case=operation.as_strategy())
        @settings(
            max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None
        )
        def exercise(case: Any) -> None:
            response = case.call(base_url=api_url, headers=admin.headers(), timeout=10)
            if response.status_code >= 500:
                failures.append(f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:200]}")

        exercise()
    assert operations >= 5
    assert not failures, "\n".join(failures)
