"""The sign-in throttle: too many failed logins for one email, or from one address, wait.

Without it a password — and behind it a six-digit second factor — could be tried as fast as
the API answers. Every failed attempt (wrong password, unknown email, wrong or replayed code)
is a ``login_failures`` row, written in a transaction of its own so the refusal does not roll
it back; a success clears the email's rows. Before checking a password, as many failures
for the email as ``API_LOGIN_FAILURES_PER_EMAIL`` (10), or from the address as
``API_LOGIN_FAILURES_PER_ADDRESS`` (100), within ``API_LOGIN_FAILURE_WINDOW_S`` (15 min),
answer ``429 login_rate_limited`` with ``Retry-After``: the password is not even
checked, so the limit also holds for the right one.

The row is written *before* the password is checked (``begin_attempt``), committed, and only
then are the rows counted: concurrent attempts each count the ones committed before them, so
at most the limit of them go on. Counted first and written after a wrong password, a burst of
concurrent guesses all read the same count and all went on (2026-12-05). An attempt refused
by the count takes its row back; one that succeeds clears them all; one that fails keeps it
as its failure. Counted in PostgreSQL, so every API
replica sees the same numbers. The address is the connection's peer as uvicorn reports it
(behind a proxy, run uvicorn with ``--proxy-headers`` and the proxy's address trusted).
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from services.api.core.errors import RateLimited
from switchboard.db.models.limits import LoginFailure

KEEP: Final = timedelta(days=1)


@dataclass(frozen=True)
class Limits:
    per_email: int = 10
    per_address: int = 100
    window: timedelta = timedelta(minutes=15)


class TooManyAttempts(RateLimited):
    code = "login_rate_limited"
    default_message = "Too many failed sign-ins: wait before trying again"


def email_key(email: str) -> str:
    return email.strip().lower()


async def begin_attempt(
    sessions: async_sessionmaker[AsyncSession], email: str, address: str, limits: Limits
) -> uuid.UUID:
    """Count this attempt as a failure until it succeeds, then check the limits with it counted;
    returns the attempt's row (``forget_attempt`` takes it back when the request fails otherwise)."""
    async with sessions() as session, session.begin():
        attempt = LoginFailure(id=uuid.uuid4(), email_key=email_key(email), client_address=address)
        session.add(attempt)
        await session.execute(delete(LoginFailure).where(LoginFailure.created_at < datetime.now(UTC) - KEEP))
    try:
        async with sessions() as session:
            await _check(session, email, address, limits, counted=1)
    except TooManyAttempts:
        await forget_attempt(sessions, attempt.id)
        raise
    return attempt.id


async def forget_attempt(sessions: async_sessionmaker[AsyncSession], attempt_id: uuid.UUID) -> None:
    """An attempt that was no failure of the password (refused by the count, or failed otherwise)."""
    async with sessions() as session, session.begin():
        await session.execute(delete(LoginFailure).where(LoginFailure.id == attempt_id))


async def _check(session: AsyncSession, email: str, address: str, limits: Limits, *, counted: int) -> None:
    """Raise :class:`TooManyAttempts` when the email or the address used up its failures
    (``counted``: this attempt's own rows among them)."""
    since = datetime.now(UTC) - limits.window
    for column, value, limit in (
        (LoginFailure.email_key, email_key(email), limits.per_email),
        (LoginFailure.client_address, address, limits.per_address),
    ):
        count, oldest = (
            await session.execute(
                select(func.count(), func.min(LoginFailure.created_at)).where(
                    column == value, LoginFailure.created_at >= since
                )
            )
        ).one()
        if count - counted >= limit:
            wait_s = max(1, math.ceil((oldest + limits.window - datetime.now(UTC)).total_seconds()))
            raise TooManyAttempts(details={"retry_after_s": wait_s}, headers={"Retry-After": str(wait_s)})


async def clear(session: AsyncSession, email: str) -> None:
    """A successful sign-in forgets the email's failures (not the address's)."""
    await session.execute(delete(LoginFailure).where(LoginFailure.email_key == email_key(email)))
