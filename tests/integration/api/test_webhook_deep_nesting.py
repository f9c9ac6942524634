"""A webhook body nested too deep is a 422 whichever parser reads it: a NUL or lone-surrogate escape
sends the body through ``json.loads``, whose ``RecursionError`` must not become a 500."""

from __future__ import annotations

import httpx
import pytest

from tests.support.api import OrgHandle

pytestmark = pytest.mark.integration

WEBHOOK = "/api/v1/webhooks/waha"
DEPTH = 50_000


def _deep_body(text_escape: bytes) -> bytes:
    nested = b"[" * DEPTH + b"]" * DEPTH
    payload = b'{"body": "a' + text_escape + b'", "deep": ' + nested + b"}"
    return b'{"event": "message", "session": "x", "payload": ' + payload + b"}"


@pytest.mark.parametrize(
    "text_escape",
    [pytest.param(b"\\u0000", id="nul-escape"), pytest.param(b"\\ud83d", id="lone-surrogate-escape")],
)
async def test_deep_nesting_with_an_escape_is_refused_like_without_it(
    client: httpx.AsyncClient, org: OrgHandle, text_escape: bytes
) -> None:
    headers = {"Content-Type": "application/json"}
    plain = await client.post(WEBHOOK, content=_deep_body(b""), headers=headers)
    escaped = await client.post(WEBHOOK, content=_deep_body(text_escape), headers=headers)
    assert plain.status_code == 422, plain.text
    assert escaped.status_code == 422, escaped.text
    assert escaped.json()["error"]["code"] == plain.json()["error"]["code"] == "validation_error"
    assert escaped.json()["error"]["message"] == plain.json()["error"]["message"]
    assert [e["type"] for e in escaped.json()["error"]["details"]["errors"]] == ["json_invalid"]
