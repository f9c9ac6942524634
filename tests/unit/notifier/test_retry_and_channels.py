"""Retry classification and backoff, webhook signatures, WAHA answers, the plugin registry (pure)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import random
import uuid

import httpx
import pytest

from services.notifier.channels import CHANNELS, ChannelError, ChannelRegistry, Destination, SendResult
from services.notifier.channels.base import raise_for_response
from services.notifier.channels.waha import WahaChannel, _message_id
from services.notifier.channels.webhook import SIGNATURE_HEADER, WebhookChannel, signed_headers
from services.notifier.retry import RetryPolicy, send_with_retry
from services.notifier.store import RouteCache


@pytest.mark.parametrize(
    ("status", "transient"),
    [(500, True), (502, True), (503, True), (429, True), (400, False), (401, False), (404, False), (422, False)],
)
def test_5xx_and_429_are_transient_other_4xx_permanent(status: int, transient: bool) -> None:
    with pytest.raises(ChannelError) as caught:
        raise_for_response(httpx.Response(status, text="secret customer text"))
    assert caught.value.transient is transient and caught.value.code == f"http_{status}"
    assert "secret customer text" not in caught.value.message


def test_backoff_grows_exponentially_with_full_jitter_under_the_cap() -> None:
    policy = RetryPolicy(max_attempts=10, initial_backoff_s=0.5, max_backoff_s=4.0)
    rng = random.Random(7)
    for attempt, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (8, 4.0)]:
        delays = [policy.backoff(attempt, rng) for _ in range(200)]
        assert all(0 <= d <= ceiling for d in delays)
        assert max(delays) > ceiling * 0.8, "jitter spreads over the whole window"


class Script:
    """A send that fails with the given errors first, then succeeds."""

    def __init__(self, *errors: ChannelError) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> SendResult:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return SendResult(external_id="wamid.1")


TRANSIENT = ChannelError("http_503", "unavailable", transient=True, status=503)
PERMANENT = ChannelError("http_400", "bad request", transient=False, status=400)


@pytest.mark.parametrize(
    ("errors", "attempts", "delivered", "sleeps"),
    [
        ((), 1, True, 0),
        ((TRANSIENT,), 2, True, 1),
        ((TRANSIENT, TRANSIENT), 3, True, 2),
        ((PERMANENT,), 1, False, 0),
        ((TRANSIENT, PERMANENT), 2, False, 1),
        ((TRANSIENT,) * 5, 3, False, 2),  # capped at max_attempts
    ],
)
async def test_send_with_retry(errors: tuple[ChannelError, ...], attempts: int, delivered: bool, sleeps: int) -> None:
    slept: list[float] = []

    async def sleep(delay: float) -> None:
        slept.append(delay)

    send = Script(*errors)
    outcome = await send_with_retry(send, RetryPolicy(max_attempts=3), what={}, sleep=sleep)
    assert outcome.attempts == attempts == send.calls
    assert (outcome.error is None) is delivered and len(slept) == sleeps


def test_webhook_signature_covers_timestamp_and_body() -> None:
    body = WebhookChannel.document({"type": "conversation.handoff", "data": {"b": 1, "a": 2}}).encode()
    headers = signed_headers("s3cret", body, event_id="e1", now=1_700_000_000)
    expected = hmac.new(b"s3cret", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert headers[SIGNATURE_HEADER] == f"sha256={expected}"
    assert headers["X-Switchboard-Event-Id"] == "e1"
    assert body == b'{"data":{"a":2,"b":1},"type":"conversation.handoff"}', "canonical: sorted, compact"


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"id": "true_55@c.us_ABC"}, "true_55@c.us_ABC"),
        ({"id": {"_serialized": "true_55@c.us_DEF", "id": "DEF"}}, "true_55@c.us_DEF"),
        ({"id": ""}, None),
        ({}, None),
        ([], None),
        (None, None),
    ],
)
def test_waha_message_id_is_read_from_either_shape(answer: object, expected: str | None) -> None:
    assert _message_id(answer) == expected


async def test_registry_knows_every_plugin_once_and_refuses_unknown_ones() -> None:
    assert {"waha": WahaChannel, "webhook": WebhookChannel} == CHANNELS
    async with httpx.AsyncClient() as client:
        registry = ChannelRegistry(client, timeout_s=1)
        assert isinstance(registry.get("waha"), WahaChannel)
        with pytest.raises(ChannelError) as caught:
            registry.get("telegram")
    assert caught.value.code == "unknown_channel" and not caught.value.transient


def _raising(exc: Exception) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    return httpx.MockTransport(handler)


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (httpx.ConnectError("refused"), "connect_error"),
        (httpx.ReadTimeout("slow"), "timeout"),
        (httpx.RemoteProtocolError("dropped"), "transport_error"),
    ],
)
async def test_transport_failures_are_transient_with_stable_codes(exc: Exception, code: str) -> None:
    async with httpx.AsyncClient(transport=_raising(exc)) as client:
        channel = WahaChannel(client, timeout_s=1)
        with pytest.raises(ChannelError) as caught:
            await channel.send(Destination("http://waha", "s", "55@c.us", secret="k"), "oi", idempotency_key="m1")
    assert caught.value.code == code and caught.value.transient


async def test_a_route_is_read_once_per_ttl_and_again_after_it() -> None:
    """The notifier reads a channel session's route (and opens its key) once per ROUTE_TTL_S."""

    loads: list[int] = []

    async def load() -> tuple[None, str]:
        loads.append(1)
        return None, f"route-{len(loads)}"

    org, session = uuid.uuid4(), uuid.uuid4()
    cache = RouteCache(ttl_s=0.2)
    assert await cache.get(org, session, load) == (None, "route-1")
    assert await cache.get(org, session, load) == (None, "route-1")
    assert await cache.get(org, uuid.uuid4(), load) == (None, "route-2")  # another session: its own read
    await asyncio.sleep(0.25)
    assert await cache.get(org, session, load) == (None, "route-3")
    assert len(loads) == 3


@pytest.mark.parametrize(("from_model", "sent"), [(True, "*Pedido* enviado"), (False, "**Pedido** enviado")])
async def test_waha_renders_markdown_only_for_what_a_model_wrote(from_model: bool, sent: str) -> None:
    """A reply or an agent's message is converted to WhatsApp's markup; what a person typed in the
    inbox goes exactly as typed."""
    bodies: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content)["text"])
        return httpx.Response(201, json={"id": "true_1"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        channel = WahaChannel(client, timeout_s=1)
        destination = Destination("http://waha", "s", "55@c.us", secret="k")
        await channel.send(destination, "**Pedido** enviado", idempotency_key="m1", from_model=from_model)
    assert bodies == [sent]


@pytest.mark.parametrize(
    ("error", "ambiguous"),
    [
        (ChannelError("timeout", "no answer", transient=True), True),
        (ChannelError("transport_error", "dropped", transient=True), True),
        (ChannelError("http_500", "boom", transient=True, status=500), True),
        (ChannelError("http_504", "gateway timeout", transient=True, status=504), True),
        (ChannelError("http_502", "bad gateway", transient=True, status=502), False),
        (ChannelError("http_503", "not ready", transient=True, status=503), False),
        (ChannelError("http_429", "slow down", transient=True, status=429), False),
        (ChannelError("connect_error", "never left", transient=True), False),
    ],
)
def test_a_failure_leaves_the_send_in_doubt_only_when_the_request_may_have_been_handled(
    error: ChannelError, ambiguous: bool
) -> None:
    assert error.ambiguous is ambiguous
    policy = RetryPolicy(initial_backoff_s=0.01, max_backoff_s=0.01, echo_wait_s=2.0)
    assert (policy.wait_before_retry(1, error) >= 2.0) is ambiguous
