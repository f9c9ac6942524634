"""``GET /api/v1/usage?month=``: a month ``date`` cannot hold (year 0000) is a 422 on ``month``
like any malformed one, never a 500."""

from __future__ import annotations

import httpx
import pytest

from switchboard.db.enums import Role
from tests.support.api import OrgHandle

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("month", ["0000-01", "0000-12", "2026-13", "2026-00", "26-01", "٢٠٢٦-01", "2026-1"])
async def test_an_impossible_month_is_a_422_on_month(client: httpx.AsyncClient, org: OrgHandle, month: str) -> None:
    response = await client.get("/api/v1/usage", params={"month": month}, headers=org.headers(Role.VIEWER))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["details"]["field"] == "month"


@pytest.mark.parametrize("month", ["0001-01", "9999-12"])
async def test_the_first_and_last_months_date_can_hold_are_answered(
    client: httpx.AsyncClient, org: OrgHandle, month: str
) -> None:
    response = await client.get("/api/v1/usage", params={"month": month}, headers=org.headers(Role.VIEWER))
    assert response.status_code == 200, response.text
