"""The chaos workload: customer messages at a steady rate through the signed webhook, and the faults.

Everything blocking (killing and restarting processes, the broker scripts, health polls)
runs in a thread: the fake model server lives in the test's event loop and must keep
answering the runner while a fault is under way.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx

from scripts.demo import bootstrap, processes
from scripts.demo.bootstrap import DemoOrg
from tests.chaos.broker import PrivateBroker

SERVICES = ("api", "dispatcher", "runner", "notifier", "brief")


@dataclass(frozen=True)
class Profile:
    """How much traffic, how fast, and how long the pipeline may take to settle afterwards."""

    name: str
    messages: int
    conversations: int
    rate_per_s: float
    settle_timeout_s: float


PROFILES = {
    # ~50 s of traffic: the whole test (start-up, faults, settling) stays within ~3 minutes.
    "ci": Profile("ci", messages=400, conversations=40, rate_per_s=8.0, settle_timeout_s=120.0),
    # `make chaos`: the 2,000 messages over 200 conversations (~3.5 minutes of traffic).
    "full": Profile("full", messages=2000, conversations=200, rate_per_s=10.0, settle_timeout_s=300.0),
}

# When each fault hits, as a fraction of the sending window: one at a time, each during traffic.
FAULT_SCHEDULE: tuple[tuple[float, str], ...] = (
    (0.15, "dispatcher"),
    (0.35, "runner"),
    (0.55, "notifier"),
    (0.75, "broker"),
)
FAULT_TARGETS = tuple(target for _, target in FAULT_SCHEDULE)


def profile_from_env() -> Profile:
    name = os.environ.get("CHAOS_PROFILE", "ci")
    if name not in PROFILES:
        raise ValueError(f"CHAOS_PROFILE must be one of {sorted(PROFILES)}, not {name!r}")
    return PROFILES[name]


@dataclass(frozen=True)
class Sent:
    index: int
    chat_id: str
    text: str
    message_id: str
    sent_at: datetime


@dataclass(frozen=True)
class Fault:
    target: str  # a service name, or "broker"
    at: datetime  # when it was killed (or the broker stopped)
    back_after_s: float  # until everything answered /readyz again
    supervisor_restarts: tuple[str, ...] = ()  # processes that exited meanwhile and were started again
    waited_for: tuple[tuple[str, float], ...] = ()  # each service's seconds until ready, when more than 1 s
    runs_in_flight: int | None = None  # runs pending or running at the moment of the kill (runner only)


@dataclass
class SendLog:
    sent: list[Sent] = field(default_factory=list)
    webhook_retries: int = 0
    failures: list[str] = field(default_factory=list)


def chat_ids(count: int) -> list[str]:
    """``count`` distinct WhatsApp chat ids, unlike anyone else's in the org."""
    base = random.randrange(10**6, 10**7)
    return [f"55{base}{i:05d}@c.us" for i in range(count)]


async def send_one(api: httpx.AsyncClient, org: DemoOrg, chat_id: str, text: str, log: SendLog) -> str | None:
    """One inbound message; retried (as WAHA retries) with the same WhatsApp id, so at most one is stored."""
    payload = {"id": f"wamid.{uuid.uuid4().hex}", "timestamp": time.time(), "from": chat_id, "fromMe": False}
    for attempt in range(4):
        try:
            data = await bootstrap.post_webhook(api, org, "message", {**payload, "body": text})
            return str(data["message_id"])
        except (httpx.HTTPError, bootstrap.DemoError) as exc:
            if attempt == 3:
                log.failures.append(f"{chat_id}: {text}: {exc}")
                return None
            log.webhook_retries += 1
            await asyncio.sleep(0.5 * (attempt + 1))
    return None


async def send_steadily(api: httpx.AsyncClient, org: DemoOrg, profile: Profile, tag: str) -> SendLog:
    """``profile.messages`` messages round-robin over ``profile.conversations`` chats, one every 1/rate s."""
    log = SendLog()
    chats = chat_ids(profile.conversations)
    gate = asyncio.Semaphore(32)
    began = time.monotonic()

    async def one(index: int) -> None:
        chat = chats[index % len(chats)]
        text = f"chaos {tag} message {index} in chat {index % len(chats)}"
        async with gate:
            message_id = await send_one(api, org, chat, text, log)
        if message_id is not None:
            log.sent.append(Sent(index, chat, text, message_id, datetime.now(UTC)))

    tasks = []
    for index in range(profile.messages):
        delay = began + index / profile.rate_per_s - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(index)))
    await asyncio.gather(*tasks)
    return log


def wait_ready(
    group: processes.ProcessGroup, names: tuple[str, ...], timeout_s: float, waited: dict[str, float] | None = None
) -> list[str]:
    """Until every named process answers /readyz 200 (it is consuming again); raise with its log otherwise.

    A process that exited is started again, as its supervisor (Kubernetes) would: the dispatcher exits
    on purpose (code 70) when a batch cannot be committed because the broker is gone, so that the batch
    is replayed from the changelog. Returns what was restarted (at most three restarts); ``waited``
    gets each service's seconds from the call until it answered ready.
    """
    began = time.monotonic()
    deadline = began + timeout_s
    pending = list(names)
    restarted: list[str] = []
    while pending:
        name = pending[0]
        proc = group.procs[name]
        if proc.popen.poll() is not None:
            if len(restarted) >= 3:
                raise RuntimeError(f"{name} exited with {proc.popen.returncode}:\n{processes.tail(proc.log_path, 40)}")
            restarted.append(f"{name} (exit {proc.popen.returncode})")
            group.restart(name)
            continue
        try:
            if httpx.get(proc.ready_url, timeout=2).status_code == 200:
                pending.pop(0)
                if waited is not None:
                    waited[name] = time.monotonic() - began
                continue
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} not ready after {timeout_s:.0f} s:\n{processes.tail(proc.log_path, 40)}")
        time.sleep(0.2)
    return restarted


def inflict(
    group: processes.ProcessGroup,
    broker: PrivateBroker,
    target: str,
    ready_timeout_s: float,
    down_s: float = 0.0,
    in_flight: Callable[[], int] | None = None,
) -> Fault:
    """SIGKILL ``target`` and start it again after ``down_s`` (or restart the broker); back when all are ready.

    The runner is killed only once it holds a run (``in_flight``, up to 15 s of waiting): a kill
    between two runs would prove nothing about recovery, and on a fast moment it happened."""
    runs_in_flight = None
    if target == "runner" and in_flight is not None:
        deadline = time.monotonic() + 15.0
        while (runs_in_flight := in_flight()) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
    at = datetime.now(UTC)
    began = time.monotonic()
    if target == "broker":
        broker.stop()
        time.sleep(down_s)  # an outage of a chosen length, not a synchronisation
        broker.start()
    else:
        group.kill(target)
        time.sleep(down_s)
        group.restart(target)
    waited: dict[str, float] = {}
    restarted = wait_ready(group, SERVICES, ready_timeout_s, waited)
    slow = tuple((name, round(seconds, 1)) for name, seconds in waited.items() if seconds > 1.0)
    return Fault(target, at, time.monotonic() - began, tuple(restarted), slow, runs_in_flight)


async def run_with_faults(
    send: Callable[[], asyncio.Future[SendLog] | asyncio.Task[SendLog]],
    group: processes.ProcessGroup,
    broker: PrivateBroker,
    profile: Profile,
    outages: dict[str, float] | None = None,
    in_flight: Callable[[], int] | None = None,
) -> tuple[SendLog, list[Fault]]:
    """Start sending, inflict each fault of the schedule at its moment (one at a time), wait for both."""
    window_s = profile.messages / profile.rate_per_s
    began = time.monotonic()
    sending = send()
    faults: list[Fault] = []
    for fraction, target in FAULT_SCHEDULE:
        delay = began + fraction * window_s - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        down_s = (outages or {}).get(target, 0.0)
        faults.append(await asyncio.to_thread(inflict, group, broker, target, 120.0, down_s, in_flight))
    return await sending, faults
