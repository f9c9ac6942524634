"""The morning push (services/notifier/digest_push.py): at the org's ``digest_hour`` in its own
zone, the day's Home digest goes to the org's signed webhook as ``home.digest`` — once per org
and day however many notifiers look, never before the hour, never without a webhook, a digest
or an hour set."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import delete, update

from scripts.channel_server import ChannelServer
from services.notifier import digest_push
from services.notifier.channels import ChannelRegistry
from services.notifier.handlers import NotifierHandlers
from services.notifier.notifications import NotificationQueue
from services.notifier.retry import RetryPolicy
from services.notifier.settings import NotifierSettings
from services.notifier.store import Notification, NotifierStore
from switchboard.crypto import KeyRing
from switchboard.db.models import WorkspaceDailyBrief
from switchboard.db.models.notifications import OrgNotification, OrgWebhook
from switchboard.db.models.tenancy import Organization
from switchboard.db.session import create_async_engine, create_async_sessionmaker
from tests.integration.notifier.conftest import RunningNotifier, WebhookReceiver, World, eventually
from tests.integration.notifier.test_handoff import notifications, set_webhook, verify
from tests.support.agents import tenant_session
from tests.support.api import create_org
from tests.support.ports import free_port
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration


def _digest(day: date, *, runs: int, todo: int) -> dict[str, Any]:
    """A stored digest as the brief writes it (only what the push reads matters here)."""
    return {
        "date": day.isoformat(),
        "time_zone": "UTC",
        "sections": ["pulse", "done", "todo", "planets"],
        "pulse": {"text": f"{runs} runs", "runs": runs, "replies": runs - 1, "handoffs": 1, "spend_micros": 420_000},
        "done": [{"text": "sent 2 WhatsApp messages", "count": 2}],
        "todo": [{"kind": "proposed_action", "title": f"Approve #{n}"} for n in range(todo)],
        "planets": [],
    }


def _store_digests(world: World, digests: dict[date, dict[str, Any]]) -> None:
    with tenant_session(world.org) as session:
        for day, digest in digests.items():
            session.add(WorkspaceDailyBrief(org_id=world.org.org_id, day=day, digest=digest))


def _set_org(world: World, **values: Any) -> None:
    with tenant_session(world.org) as session:
        session.execute(update(Organization).where(Organization.id == world.org.org_id).values(**values))


def _zone_at_noon() -> tuple[str, date]:
    """A fixed-offset zone where it is about noon now, and its date (Etc/GMT-5 is UTC+5)."""
    now = datetime.now(UTC)
    offset = 12 - now.hour  # -11..12, all of them zones
    zone = "Etc/GMT" if offset == 0 else f"Etc/GMT{-offset:+d}"
    return zone, (now + timedelta(hours=offset)).date()


def _home_digests(receiver: WebhookReceiver) -> list[dict[str, Any]]:
    return [hit.json() for hit in receiver.hits if hit.json()["type"] == "home.digest"]


async def test_the_push_is_due_from_the_orgs_local_hour_with_a_webhook_and_a_digest(
    stack: StackEndpoints, keyring: KeyRing, world: World, receiver: WebhookReceiver, api: httpx.AsyncClient
) -> None:
    await set_webhook(api, world, receiver.url)
    _set_org(world, time_zone="America/Sao_Paulo", digest_hour=8)  # UTC-3, no daylight saving
    day = date(2026, 12, 3)
    _store_digests(world, {day: _digest(day, runs=1, todo=0)})
    engine = create_async_engine(stack.database_url)
    store = NotifierStore(create_async_sessionmaker(engine), keyring, waha_base_url="http://127.0.0.1:9")
    org = world.org.org_id

    async def due(now: datetime) -> list[date]:
        return [d for o, d in await store.due_digests(now, 10_000) if o == org]

    try:
        assert await due(datetime(2026, 12, 3, 10, 59, tzinfo=UTC)) == [], "07:59 in São Paulo: not yet"
        assert await due(datetime(2026, 12, 3, 11, 0, tzinfo=UTC)) == [day], "08:00 in São Paulo"
        assert await due(datetime(2026, 12, 4, 2, 59, tzinfo=UTC)) == [day], "still today at 23:59 there"
        assert await due(datetime(2026, 12, 4, 11, 0, tzinfo=UTC)) == [], "the next day has no digest yet"

        # Two notifiers that both saw it due: only the one whose insert created the row sends it.
        racing = [store.create_notification(org, f"home_digest:{day}", "home.digest", {}) for _ in range(2)]
        created = [n for n in await asyncio.gather(*racing) if n is not None]
        assert len(created) == 1
        assert await due(datetime(2026, 12, 3, 11, 0, tzinfo=UTC)) == [], "told already"
        with tenant_session(world.org) as session:
            session.execute(delete(OrgNotification).where(OrgNotification.org_id == org))

        # Daylight saving: 08:00 in Rome is 07:00 UTC in winter and 06:00 UTC in summer.
        _set_org(world, time_zone="Europe/Rome")
        summer = date(2026, 7, 1)
        _store_digests(world, {summer: _digest(summer, runs=1, todo=0)})
        assert await due(datetime(2026, 7, 1, 5, 59, tzinfo=UTC)) == [], "07:59 CEST"
        assert await due(datetime(2026, 7, 1, 6, 0, tzinfo=UTC)) == [summer], "08:00 CEST"
        assert await due(datetime(2026, 12, 3, 6, 59, tzinfo=UTC)) == [], "07:59 CET"
        assert await due(datetime(2026, 12, 3, 7, 0, tzinfo=UTC)) == [day], "08:00 CET"
        _set_org(world, time_zone="Mars/Olympus")  # not a zone (written around the API): counted as UTC
        assert await due(datetime(2026, 12, 3, 7, 59, tzinfo=UTC)) == []
        assert await due(datetime(2026, 12, 3, 8, 0, tzinfo=UTC)) == [day]

        _set_org(world, digest_hour=None)
        assert await due(datetime(2026, 12, 3, 23, 0, tzinfo=UTC)) == [], "no hour: the push is off"
        _set_org(world, digest_hour=8)
        with tenant_session(world.org) as session:
            session.execute(delete(OrgWebhook).where(OrgWebhook.org_id == org))
        assert await due(datetime(2026, 12, 3, 23, 0, tzinfo=UTC)) == [], "no webhook: nobody to tell"
    finally:
        await engine.dispose()


async def test_the_days_digest_reaches_the_signed_webhook_once_however_many_notifiers_look(
    keyring: KeyRing,
    world: World,
    receiver: WebhookReceiver,
    api: httpx.AsyncClient,
    notifier_settings: NotifierSettings,
) -> None:
    secret = await set_webhook(api, world, receiver.url)
    zone, today = _zone_at_noon()  # far from its midnight: the test's day cannot end mid-test
    _set_org(world, time_zone=zone, digest_hour=0)
    yesterday = today - timedelta(days=1)
    _store_digests(world, {today: _digest(today, runs=0, todo=2), yesterday: _digest(yesterday, runs=3, todo=0)})
    receiver.fail_next(503)  # the first attempt fails: retried, with the same event id

    settings = notifier_settings.model_copy(update={"digest_interval_s": 0.2})
    notifiers = [await RunningNotifier(settings, keyring).wait_ready() for _ in range(2)]
    try:
        await eventually(lambda: _home_digests(receiver), lambda hits: len(hits) == 2)  # the 503, then the delivery
        await asyncio.sleep(1.0)  # five more passes of each notifier
        hits = [hit for hit in receiver.hits if hit.json()["type"] == "home.digest"]
        assert len(hits) == 2, "once per org and day"
        first, delivered = (hit.json() for hit in hits)
        assert first["id"] == delivered["id"]
        assert verify(secret, hits[1].headers, hits[1].body)

        assert delivered["org_id"] == str(world.org.org_id)
        data = delivered["data"]
        assert data["date"] == today.isoformat()
        assert data["summary"] == "Yesterday: 3 runs, 2 replies, 1 handoff, $0.42 spent. 2 items wait for you."
        assert data["digest"]["date"] == today.isoformat()
        assert data["digest"]["todo"] == [
            {"kind": "proposed_action", "title": "Approve #0"},
            {"kind": "proposed_action", "title": "Approve #1"},
        ]
        assert data["yesterday"]["date"] == yesterday.isoformat() and data["yesterday"]["pulse"]["runs"] == 3
        [row] = [n for n in notifications(world) if n.event_type == "home.digest"]
        assert (row.dedupe_key, row.status) == (f"home_digest:{today.isoformat()}", "sent")
    finally:
        for notifier in notifiers:
            await notifier.stop()


async def test_a_pass_goes_through_every_due_org_page_by_page(
    stack: StackEndpoints,
    keyring: KeyRing,
    channel: ChannelServer,
    world: World,
    receiver: WebhookReceiver,
    api: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    day = date(2031, 6, 15)  # a day no other test's org has a digest of
    worlds = [world, *(World(create_org(stack.database_url), keyring, channel.url) for _ in range(2))]
    for each in worlds:
        await set_webhook(api, each, receiver.url)
        _set_org(each, time_zone="UTC", digest_hour=8)
        _store_digests(each, {day: _digest(day, runs=1, todo=1)})
    monkeypatch.setattr(digest_push, "PAGE", 1)  # a page per org
    queued: list[tuple[uuid.UUID, str]] = []

    async def record(org_id: uuid.UUID, notification: Notification, _: asyncio.Semaphore | None) -> None:
        queued.append((org_id, notification.event_type))

    engine = create_async_engine(stack.database_url)
    store = NotifierStore(create_async_sessionmaker(engine), keyring, waha_base_url="http://127.0.0.1:9")
    queue = NotificationQueue(record)
    try:
        at_nine = datetime(2031, 6, 15, 9, 0, tzinfo=UTC)
        assert await digest_push.push_due(store, queue, asyncio.Semaphore(1), at_nine) == 3
        await queue.wait_idle(10)
        assert sorted(queued) == sorted((each.org.org_id, "home.digest") for each in worlds)
        assert await digest_push.push_due(store, queue, asyncio.Semaphore(1), at_nine) == 0, "once a day"
    finally:
        await engine.dispose()


async def test_an_org_whose_webhook_is_down_does_not_keep_the_others_mornings_waiting(
    stack: StackEndpoints,
    keyring: KeyRing,
    channel: ChannelServer,
    world: World,
    receiver: WebhookReceiver,
    api: httpx.AsyncClient,
) -> None:
    """The push sends only so many at once, but a webhook that is down waits its backoff without
    a slot: with one slot, the live org's digest arrives while the dead one is still retrying."""
    day = date(2031, 7, 1)  # a day no other test's org has a digest of
    other = World(create_org(stack.database_url), keyring, channel.url)
    dead, live = sorted([world, other], key=lambda w: str(w.org.org_id))  # the pass meets the dead one first
    await set_webhook(api, dead, f"http://127.0.0.1:{free_port()}/gone")
    await set_webhook(api, live, receiver.url)
    for each in (dead, live):
        _set_org(each, time_zone="UTC", digest_hour=8)
        _store_digests(each, {day: _digest(day, runs=1, todo=0)})
    engine = create_async_engine(stack.database_url)
    client = httpx.AsyncClient()
    store = NotifierStore(create_async_sessionmaker(engine), keyring, waha_base_url="http://127.0.0.1:9")
    patient = RetryPolicy(max_attempts=4, initial_backoff_s=4.0, max_backoff_s=4.0)  # up to 12 s of waiting
    handlers = NotifierHandlers(store, ChannelRegistry(client, timeout_s=5), patient)
    try:
        at_nine = datetime(2031, 7, 1, 9, 0, tzinfo=UTC)
        assert await digest_push.push_due(store, handlers.notifications, asyncio.Semaphore(1), at_nine) == 2
        await eventually(lambda: len(receiver.hits), lambda n: n == 1, timeout=3.0)
        assert [n.status for n in notifications(dead)] == ["pending"], "the dead one was still retrying"
    finally:
        await handlers.notifications.close(0)
        await client.aclose()
        await engine.dispose()
