"""The sign-in throttle (services/api/identity/throttle.py): failures per email and per address
lead to 429 with Retry-After — even for the right password —, a success forgets the email's
failures, and a TOTP code is good once."""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from sqlalchemy import func, select

from services.api.app import create_app
from services.api.core.security import totp_code
from services.api.settings import ApiSettings
from switchboard.db.models.limits import LoginFailure
from switchboard.db.session import create_engine
from tests.support.api import OrgHandle

pytestmark = pytest.mark.integration

PASSWORD = "correct horse battery staple"


@pytest.fixture
async def from_address(api_settings: ApiSettings) -> AsyncIterator[Callable[[str], httpx.AsyncClient]]:
    """Clients of one app, each from its own address, with small limits (3 per email, 5 per address)."""
    settings = api_settings.model_copy(update={"login_failures_per_email": 3, "login_failures_per_address": 5})
    app = create_app(settings)
    clients: list[httpx.AsyncClient] = []
    async with app.router.lifespan_context(app):

        def _client(address: str) -> httpx.AsyncClient:
            transport = httpx.ASGITransport(app=app, client=(address, 40000))
            client = httpx.AsyncClient(transport=transport, base_url="http://api.test")
            clients.append(client)
            return client

        yield _client
        for client in clients:
            await client.aclose()


def _failures(api_settings: ApiSettings, email: str) -> int:
    engine = create_engine(api_settings.database.url.get_secret_value(), pool_size=1)
    try:
        with engine.connect() as conn:
            return int(conn.scalar(select(func.count()).where(LoginFailure.email_key == email.lower())) or 0)
    finally:
        engine.dispose()


def _address() -> str:
    return f"198.51.100.{uuid.uuid4().int % 250 + 1}-{uuid.uuid4().hex[:6]}"


async def test_an_email_with_too_many_failures_waits_even_with_the_right_password(
    from_address: Callable[[str], httpx.AsyncClient], make_org: Callable[..., OrgHandle], api_settings: ApiSettings
) -> None:
    email = f"Owner-{uuid.uuid4().hex[:8]}@Example.com"
    make_org(email=email, password=PASSWORD)
    other_email = f"other-{uuid.uuid4().hex[:8]}@example.com"
    make_org(email=other_email, password=PASSWORD)
    client = from_address(_address())

    for _ in range(3):
        wrong = await client.post("/api/v1/auth/login", json={"email": email, "password": "guess"})
        assert wrong.status_code == 401
    assert _failures(api_settings, email) == 3, "each refusal was counted though its request failed"
    locked = await client.post("/api/v1/auth/login", json={"email": email.lower(), "password": PASSWORD})
    assert locked.status_code == 429 and locked.json()["error"]["code"] == "login_rate_limited"
    assert 0 < int(locked.headers["Retry-After"]) <= 900
    # Another person's account is not locked by it.
    assert (
        await client.post("/api/v1/auth/login", json={"email": other_email, "password": PASSWORD})
    ).status_code == 201


async def test_a_success_forgets_the_emails_failures(
    from_address: Callable[[str], httpx.AsyncClient], make_org: Callable[..., OrgHandle], api_settings: ApiSettings
) -> None:
    email = f"owner-{uuid.uuid4().hex[:8]}@example.com"
    make_org(email=email, password=PASSWORD)
    client = from_address(_address())
    for _ in range(2):
        assert (await client.post("/api/v1/auth/login", json={"email": email, "password": "guess"})).status_code == 401
    assert (await client.post("/api/v1/auth/login", json={"email": email, "password": PASSWORD})).status_code == 201
    assert _failures(api_settings, email) == 0
    for _ in range(2):  # a fresh count: not locked after two more
        assert (await client.post("/api/v1/auth/login", json={"email": email, "password": "guess"})).status_code == 401
    assert (await client.post("/api/v1/auth/login", json={"email": email, "password": PASSWORD})).status_code == 201


async def test_a_burst_of_concurrent_guesses_gets_no_more_tries_than_the_limit(
    from_address: Callable[[str], httpx.AsyncClient], make_org: Callable[..., OrgHandle], api_settings: ApiSettings
) -> None:
    """Twelve guesses at once: each is counted before its password is checked, and counts every
    attempt committed before it, so at most three (the limit) are checked and the rest wait — all
    twelve may wait, when each sees the others first. Counted after the check, all twelve read "no
    failures yet" and every one was checked: a limit of ten gave a burst as many guesses as it had."""
    email = f"owner-{uuid.uuid4().hex[:8]}@example.com"
    make_org(email=email, password=PASSWORD)
    clients = [from_address(_address()) for _ in range(12)]  # many addresses: only the email's limit applies
    answers = await asyncio.gather(
        *(c.post("/api/v1/auth/login", json={"email": email, "password": f"guess-{i}"}) for i, c in enumerate(clients))
    )
    codes = [a.status_code for a in answers]
    checked = codes.count(401)
    assert checked <= 3 and codes.count(429) == 12 - checked, codes
    assert _failures(api_settings, email) == checked, "a refused attempt takes its row back"
    # The burst used up no more than its failures: the owner still signs in while they are under the limit.
    right = await clients[0].post("/api/v1/auth/login", json={"email": email, "password": PASSWORD})
    assert right.status_code == (201 if checked < 3 else 429)


async def test_one_address_trying_many_emails_waits(
    from_address: Callable[[str], httpx.AsyncClient],
) -> None:
    stuffing = from_address(_address())
    for _ in range(5):
        body = {"email": f"victim-{uuid.uuid4().hex[:8]}@example.com", "password": "123456"}
        assert (await stuffing.post("/api/v1/auth/login", json=body)).status_code == 401
    body = {"email": f"victim-{uuid.uuid4().hex[:8]}@example.com", "password": "123456"}
    assert (await stuffing.post("/api/v1/auth/login", json=body)).status_code == 429
    elsewhere = from_address(_address())
    assert (await elsewhere.post("/api/v1/auth/login", json=body)).status_code == 401, "only that address waits"


async def _enrolled(client: httpx.AsyncClient, make_org: Callable[..., OrgHandle]) -> tuple[str, bytes, str]:
    """A new owner with a confirmed TOTP: their email, the TOTP secret, and the code that confirmed it."""
    email = f"owner-{uuid.uuid4().hex[:8]}@example.com"
    make_org(email=email, password=PASSWORD)
    plain = await client.post("/api/v1/auth/login", json={"email": email, "password": PASSWORD})
    auth = {"Authorization": f"Bearer {plain.json()['data']['token']}"}
    b32 = (await client.post("/api/v1/auth/mfa/totp", headers=auth)).json()["data"]["secret"]
    secret = base64.b32decode(b32 + "=" * (-len(b32) % 8))
    confirm_code = totp_code(secret)
    confirmed = await client.post("/api/v1/auth/mfa/totp:confirm", json={"code": confirm_code}, headers=auth)
    assert confirmed.status_code == 204
    return email, secret, confirm_code


async def test_a_totp_code_signs_in_once(client: httpx.AsyncClient, make_org: Callable[..., OrgHandle]) -> None:
    email, secret, confirm_code = await _enrolled(client, make_org)

    reused = await client.post(
        "/api/v1/auth/login", json={"email": email, "password": PASSWORD, "totp_code": confirm_code}
    )
    assert reused.status_code == 401, "the enrollment's code cannot sign in"
    fresh = totp_code(secret, at=time.time() + 30)  # the next step's code (one step of drift is accepted)
    first = await client.post("/api/v1/auth/login", json={"email": email, "password": PASSWORD, "totp_code": fresh})
    assert first.status_code == 201 and first.json()["data"]["mfa_verified"] is True
    replay = await client.post("/api/v1/auth/login", json={"email": email, "password": PASSWORD, "totp_code": fresh})
    assert replay.status_code == 401 and "already used" in replay.json()["error"]["message"]


async def test_a_totp_code_used_by_concurrent_logins_signs_in_once(
    client: httpx.AsyncClient, make_org: Callable[..., OrgHandle]
) -> None:
    """The same code several times at the same moment (a phished code replayed while its owner signs
    in): still once. Read first and written after, every login saw the old step and all passed."""
    email, secret, _ = await _enrolled(client, make_org)
    body = {"email": email, "password": PASSWORD, "totp_code": totp_code(secret, at=time.time() + 30)}
    logins = await asyncio.gather(*(client.post("/api/v1/auth/login", json=body) for _ in range(4)))
    assert sorted(r.status_code for r in logins) == [201, 401, 401, 401], [r.text for r in logins]


async def test_behind_a_trusted_proxy_each_client_is_throttled_by_its_own_address(
    api_settings: ApiSettings, make_org: Callable[..., OrgHandle]
) -> None:
    """The app as ``switchboard api`` serves it (``uvicorn_config``: proxy headers on). Every request
    comes from the ingress's address; ``X-Forwarded-For`` names the client, so one stranger's
    failures lock out that stranger's address, not everybody behind the proxy."""
    from services.api.__main__ import uvicorn_config

    settings = api_settings.model_copy(
        update={"login_failures_per_email": 100, "login_failures_per_address": 2, "forwarded_allow_ips": "10.0.0.9"}
    )
    config = uvicorn_config(settings)
    config.load()
    email = f"owner-{uuid.uuid4().hex[:8]}@example.com"
    make_org(email=email, password=PASSWORD)
    stranger, owner = f"203.0.113.{uuid.uuid4().int % 200 + 1}", f"198.51.100.{uuid.uuid4().int % 200 + 1}"
    app = config.app  # the FastAPI app, under uvicorn's proxy-header layer (config.loaded_app)
    transport = httpx.ASGITransport(app=config.loaded_app, client=("10.0.0.9", 40000))  # the ingress
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://api.test") as proxy,
    ):
        for _ in range(2):
            guess = {"email": f"x-{uuid.uuid4().hex[:6]}@example.com", "password": "guess"}
            wrong = await proxy.post("/api/v1/auth/login", json=guess, headers={"X-Forwarded-For": stranger})
            assert wrong.status_code == 401
        blocked = await proxy.post(
            "/api/v1/auth/login", json={"email": email, "password": PASSWORD}, headers={"X-Forwarded-For": stranger}
        )
        assert blocked.status_code == 429
        signed_in = await proxy.post(
            "/api/v1/auth/login", json={"email": email, "password": PASSWORD}, headers={"X-Forwarded-For": owner}
        )
        assert signed_in.status_code == 201, "the owner, behind the same proxy, is not locked out"
