"""Paged lists refuse a cursor they did not issue with 422 ``validation_error`` on ``cursor``,
whatever JSON it decodes to: it is client input, and a crash here would 500 every list."""

from __future__ import annotations

import base64
import json
import uuid

import httpx
import pytest

from switchboard.db.enums import Role
from tests.support.api import OrgHandle

pytestmark = pytest.mark.integration


def _cursor(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def _raw_cursor(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


BAD_CURSORS = [
    pytest.param("WyIyMDIwLTAxLTAxVDAwOjAwOjAwIiwgNV0", id="uuid-is-a-number"),
    pytest.param(_cursor(["2020-01-01T00:00:00+00:00", ["x"]]), id="uuid-is-a-list"),
    pytest.param(_cursor(["2020-01-01T00:00:00+00:00", {"a": 1}]), id="uuid-is-an-object"),
    pytest.param(_cursor([5, str(uuid.uuid4())]), id="timestamp-is-a-number"),
    pytest.param(_cursor({"a": 1, "b": 2}), id="two-key-object"),
    pytest.param(_cursor("ab"), id="two-char-string"),
    pytest.param(_cursor(None), id="null"),
    pytest.param(_cursor(["2020-01-01T00:00:00+00:00", str(uuid.uuid4()), 1]), id="three-items"),
    pytest.param(_raw_cursor(b"[" * 140), id="deep-nesting"),
    pytest.param(_raw_cursor(b"\xff\xfe"), id="not-utf8"),
    pytest.param("not base64 at all!", id="not-base64"),
]


@pytest.mark.parametrize("cursor", BAD_CURSORS)
@pytest.mark.parametrize("path", ["/api/v1/decisions", "/api/v1/runs"])
async def test_a_cursor_of_any_other_shape_is_a_422_on_cursor(
    client: httpx.AsyncClient, org: OrgHandle, path: str, cursor: str
) -> None:
    response = await client.get(path, params={"cursor": cursor}, headers=org.headers(Role.MANAGER))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["details"]["field"] == "cursor"


async def test_an_issued_shape_still_pages(client: httpx.AsyncClient, org: OrgHandle) -> None:
    cursor = _cursor(["2020-01-01T00:00:00+00:00", str(uuid.uuid4())])
    response = await client.get("/api/v1/decisions", params={"cursor": cursor}, headers=org.headers(Role.MANAGER))
    assert response.status_code == 200, response.text
    assert response.json()["data"] == []
