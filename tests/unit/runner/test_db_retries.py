"""A run's transactions ride out a burst that exhausts the connection pool, instead of dying."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import IntegrityError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from services.runner import execution


async def test_a_pool_timeout_is_retried_until_a_connection_frees() -> None:
    calls = 0

    async def claim() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise PoolTimeout("QueuePool limit reached")
        return "claimed"

    assert await execution._with_db_retries(claim) == "claimed"
    assert calls == 3


async def test_a_pool_that_never_frees_still_fails_after_the_attempts() -> None:
    calls = 0

    async def claim() -> str:
        nonlocal calls
        calls += 1
        raise PoolTimeout("QueuePool limit reached")

    with pytest.raises(PoolTimeout):
        await execution._with_db_retries(claim, attempts=3)
    assert calls == 3


async def test_a_constraint_violation_is_not_retried() -> None:
    calls = 0

    async def claim() -> str:
        nonlocal calls
        calls += 1
        raise IntegrityError("INSERT", {}, Exception("duplicate key"))

    with pytest.raises(IntegrityError):
        await execution._with_db_retries(claim)
    assert calls == 1
