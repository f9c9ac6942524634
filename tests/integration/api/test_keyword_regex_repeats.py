"""``POST /api/v1/agents/{id}/versions`` refuses a ``keyword_regex`` whose repeat counts exceed the
limit of 1000 (alone or multiplied by nesting) with 422 before compiling it: compiling ``a{5000000}``
allocates memory in proportion to the count. The counts here are small enough that compiling them
without the check is harmless, so this test fails cleanly (201) rather than exhausting memory."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.agents import create_agent, error_body, make_channel, version_body
from tests.support.api import OrgHandle

pytestmark = pytest.mark.integration


async def _save(client: httpx.AsyncClient, org: OrgHandle, pattern: str) -> httpx.Response:
    channel = make_channel(org)
    agent: dict[str, Any] = await create_agent(client, org, channel)
    trigger = {"event_types": ["message"], "keyword_regex": pattern}
    return await client.post(
        f"/api/v1/agents/{agent['agent']['id']}/versions",
        json=version_body(channel, trigger_config=trigger),
        headers=org.headers(),
    )


@pytest.mark.parametrize(
    "pattern",
    [
        pytest.param("a{1001}", id="n"),
        pytest.param("[ab]{1001,}", id="n-or-more"),
        pytest.param("pix.{0,1001}", id="n-to-m"),
        pytest.param("(?:a{100}){11}", id="nested-product"),
        pytest.param("(?x)a{2 000}", id="verbose-mode-count"),
    ],
)
async def test_a_too_large_repeat_count_is_a_422_on_keyword_regex(
    client: httpx.AsyncClient, org: OrgHandle, pattern: str
) -> None:
    response = await _save(client, org, pattern)
    assert response.status_code == 422, response.text
    error = error_body(response)
    assert error["code"] == "validation_error"
    (problem,) = [e for e in error["details"]["errors"] if e["loc"][-2:] == ["trigger_config", "keyword_regex"]]
    assert "keyword_regex_repeat_too_large" in problem["msg"]


async def test_counts_within_the_limit_are_saved(client: httpx.AsyncClient, org: OrgHandle) -> None:
    response = await _save(client, org, r"\d{3}\.?\d{3}\.?\d{3}-?\d{2}|(?:a{10}){100}")
    assert response.status_code == 201, response.text
