"""The end-to-end benchmark of ``make bench`` (issue 8 §2): ingest → reply received by the channel server.

Switchboard as ``make demo`` runs it — the five services and the local WAHA-compatible
channel server as processes (scripts/demo/processes.py), an org with a published agent
on the offline ``demo`` model (zero latency, no tool for a plain greeting) bootstrapped by
scripts/demo/bootstrap.py — in a scratch database with its own Kafka topic prefix.
Signed WAHA webhooks go to the real API at a fixed rate (default 200 msg/s, open loop)
over many chats (default 1,000) for a fixed time; latency is from each message's send to
the channel server's receipt of its reply (paired by chat and order: bench/e2e_stats.py).

Baseline, in the same run on the same machine: a pipeline of the seed's shape
(bench/e2e_baseline.py: webhook → ``event_log`` row → 100 ms poller → the same demo
model → the same channel server) under the same load, after Switchboard's services
were stopped. Goal: Switchboard's p99 ≤ 100 ms at 200 msg/s. docs/benchmarks.md says
what each figure means and what the baseline leaves out.

``--smoke`` (or ``BENCH_PROFILE=smoke``): a few seconds at 10 msg/s, to check the wiring.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ProgrammingError, SQLAlchemyError
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from bench import cpu
from bench.e2e_history import seed_baseline_history, seed_history
from bench.e2e_load import Target, chat_ids, send_open_loop, wait_replies
from bench.e2e_stages import stage_lines
from bench.e2e_stats import Summary, match, measurements, summarize
from bench.report import Measurement, add_common_arguments, publish
from scripts.demo import bootstrap, processes
from services.notifier.settings import NotifierSettings
from switchboard.db.migrate import upgrade
from switchboard.db.session import normalize_url, tenant_transaction
from switchboard.kafka import admin
from switchboard.settings import REPO_ROOT, DatabaseSettings, KafkaSettings

IMPLEMENTED: Final = True
BASELINE_LABEL: Final = "seed design: event_log + 100 ms PostgreSQL poller (e2e-baseline)"
RUN_DIR: Final = REPO_ROOT / "var" / "bench" / "e2e"
SMOKE: Final = {"rate": 10.0, "duration": 3.0, "chats": 20, "warmup": 1.0, "drain": 30.0}
# What differs from a default deployment, and why (docs/benchmarks.md): the per-conversation
# reply interval (5 s in production) would hold back a chat's next message, which measures
# a product policy, not the pipeline. The notifier's morning-push pass is put back to its
# production interval: the demo's topology looks every 2 s (its script waits for a push), and
# each look is a ~30 ms query (it reads PostgreSQL's time-zone list), which at 2 s made most of
# the database's idle CPU and about 1 ms of every message's CPU at 30 msg/s.
SERVICE_ENV: Final = {
    "DISPATCHER_REPLY_INTERVAL_S": "0",
    "NOTIFIER_DIGEST_INTERVAL_S": str(NotifierSettings.model_fields["digest_interval_s"].default),
}


@dataclass(frozen=True)
class Measured:
    """A pipeline's figures and the CPU seconds per group of processes it took (bench/cpu.py)."""

    summary: Summary
    spent: dict[str, float]


def cpu_measurement(real: Measured, base: Measured) -> Measurement:
    """``e2e.cpu_per_message``: the whole machine's CPU per answered message (load generator and
    channel server left out), beside the baseline's: the cost model behind the throughput line."""

    def per_message(measured: Measured) -> float | None:
        used = sum(seconds for group, seconds in measured.spent.items() if group not in {"load", "channel"})
        answered = measured.summary.answered
        return used * 1000 / answered if answered and measured.spent else None

    return Measurement.of(
        "e2e.cpu_per_message", per_message(real), "ms", baseline=BASELINE_LABEL, baseline_value=per_message(base)
    )


@dataclass(frozen=True)
class Scratch:
    app_url: str
    owner_url: URL


@contextlib.contextmanager
def migrated_database() -> Iterator[Scratch]:
    """A migrated scratch database (the outbox relay's lock is per database: no other API publishes ours)."""
    settings = DatabaseSettings()
    owner = normalize_url(settings.migration_url)
    app = normalize_url(settings.url.get_secret_value())
    name = f"sb_bench_e2e_{uuid.uuid4().hex[:12]}"
    server = create_engine(owner, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    with server.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        upgrade(owner.set(database=name).render_as_string(hide_password=False), app_role=app.username)
        yield Scratch(app.set(database=name).render_as_string(hide_password=False), owner.set(database=name))
    finally:
        for attempt in range(20):  # an exiting app-role backend cannot be terminated by the owner: retry
            try:
                with server.connect() as conn:
                    conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                break
            except ProgrammingError:
                if attempt == 19:
                    raise
                time.sleep(0.25)
        server.dispose()


def raise_rate_limit(owner_url: URL, org_id: str) -> None:
    """The org's default 60 runs a minute would defer almost every message of the load."""
    engine = create_engine(owner_url, poolclass=NullPool)
    try:
        with Session(engine) as session, tenant_transaction(session, org_id):
            session.execute(
                text("UPDATE organizations SET rate_limit_runs_per_minute = 100000000 WHERE id = :o"), {"o": org_id}
            )
    finally:
        engine.dispose()


async def warm_up(target: Target, channel_url: str, args: argparse.Namespace, phase: int) -> None:
    """The same rate for ``--warmup`` seconds, one message per chat of its own, replies awaited and not counted."""
    chats = chat_ids(max(1, round(args.rate * args.warmup)), phase)
    warm = await send_open_loop(target, chats, args.rate, args.warmup)
    await wait_replies(channel_url, set(chats), len(warm.sent), args.drain)


async def measure(
    name: str, target: Target, channel_url: str, args: argparse.Namespace, phase: int
) -> tuple[Summary, dict[str, float]]:
    """The fixed-rate load over ``--chats`` chats and the replies to it; and the CPU seconds each group of
    processes spent from the first send to the last reply (bench/cpu.py)."""
    chats = chat_ids(args.chats, phase)
    before = cpu.snapshot()
    load = await send_open_loop(target, chats, args.rate, args.duration)
    replies = await wait_replies(channel_url, set(chats), len(load.sent), args.drain)
    spent = cpu.spent(before, cpu.snapshot())
    summary = summarize(name, args.rate, load.sent, match(load.sent, replies), load.errors)
    print(
        f"  {name}: sent {summary.sent} (+{summary.ingest_errors} refused), answered {summary.answered}, "
        f"lost {summary.lost}, doubled {summary.doubled}; p50 {_ms(summary.p50_ms)}, p99 {_ms(summary.p99_ms)}, "
        f"max {_ms(summary.max_ms)}; {summary.throughput or 0:.1f} replies/s; sender lag max {load.max_lag_ms:.1f} ms",
        flush=True,
    )
    print(f"  {name} CPU per answered message: {cpu.per_message_line(spent, summary.answered)}", flush=True)
    return summary, spent


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def _environment(database_url: str, kafka: KafkaSettings) -> dict[str, str]:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "KAFKA_TOPIC_PREFIX": kafka.topic_prefix,
        "KAFKA_CONVERSATION_PARTITIONS": str(kafka.conversation_partitions),
    }
    for _, key in bootstrap.PROVIDER_KEYS:
        env.pop(key, None)  # the zero-latency demo model, always
    return env


async def run_switchboard(
    group: processes.ProcessGroup, scratch: Scratch, args: argparse.Namespace
) -> tuple[Measured, str, str]:
    """Start the topology, bootstrap the org, measure; the channel server's URL and key (kept for the baseline)."""
    channel_key = secrets.token_hex(12)
    service_env = {service: SERVICE_ENV for service in processes.SERVICES}
    topology = await asyncio.to_thread(
        processes.start_topology, group, channel_api_key=channel_key, preferred=False, service_env=service_env
    )
    if topology.channel_url is None:
        raise RuntimeError("scripts/channel_server.py is needed for the end-to-end benchmark")
    async with httpx.AsyncClient(base_url=topology.api_url, timeout=30) as api:
        org = await bootstrap.bootstrap(
            api,
            group.env,
            channel_url=topology.channel_url,
            channel_api_key=channel_key,
            label="Bench",
            environ={},
            # No echoes or receipts: the seed baseline gets none either (docs/benchmarks.md).
            channel_callbacks=False,
            dispatcher_metrics_url=topology.metrics_urls["dispatcher"],
        )
    raise_rate_limit(scratch.owner_url, org.org_id)
    if args.history:
        await asyncio.to_thread(seed_history, scratch.owner_url, org.org_id)
    target = Target(topology.api_url + bootstrap.WEBHOOK_PATH, org.session_name, org.webhook_secret)
    await warm_up(target, topology.channel_url, args, phase=1)
    since = datetime.now(UTC)
    summary, spent = await measure("switchboard", target, topology.channel_url, args, phase=2)
    print("  where the time went (switchboard, from its own rows):", flush=True)
    try:
        print("\n".join(stage_lines(scratch.owner_url, org.org_id, since)), flush=True)
    except SQLAlchemyError as error:  # context only: never worth losing the measurement for
        print(f"    (stage breakdown unavailable: {type(error).__name__})", flush=True)
    return Measured(summary, spent), topology.channel_url, channel_key


async def run_baseline(
    group: processes.ProcessGroup, channel_url: str, channel_key: str, args: argparse.Namespace
) -> Measured:
    """The seed-shaped pipeline as its own process, on the same channel server."""
    # Imported here: ``python -m bench`` imports this module for IMPLEMENTED only.
    from bench import dispatch
    from bench.e2e_baseline import CHANNEL_KEY_ENV, DATABASE_ENV, SECRET_ENV, WEBHOOK_PATH

    for name in [name for name in group.procs if name != "channel"]:  # idle, but they would share the cores
        group.kill(name, signal.SIGTERM)
    secret = secrets.token_hex(16)
    port = processes.pick_port()
    with dispatch.scratch_database() as url:
        if args.history:
            await asyncio.to_thread(seed_baseline_history, url)
        dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        command = [sys.executable, "-m", "bench.e2e_baseline", "--port", str(port), "--channel-url", channel_url]
        command += ["--session", "e2e-baseline", "--interval", str(args.poll_interval)]
        group.start(
            "e2e-baseline",
            command,
            f"http://127.0.0.1:{port}/healthz",
            {DATABASE_ENV: dsn, SECRET_ENV: secret, CHANNEL_KEY_ENV: channel_key},
        )
        try:
            await asyncio.to_thread(group.wait_healthy, "e2e-baseline", 30.0)
            target = Target(f"http://127.0.0.1:{port}{WEBHOOK_PATH}", "e2e-baseline", secret)
            await warm_up(target, channel_url, args, phase=3)
            return Measured(*await measure("baseline", target, channel_url, args, phase=4))
        finally:
            group.kill("e2e-baseline", signal.SIGTERM)


async def run(args: argparse.Namespace) -> list[Measurement]:
    kafka = KafkaSettings(topic_prefix=f"bench-e2e-{uuid.uuid4().hex[:8]}.", conversation_partitions=args.partitions)
    with migrated_database() as scratch:
        await admin.ensure_topics(kafka)
        group = processes.ProcessGroup(args.run_dir, _environment(scratch.app_url, kafka))
        try:
            real, channel_url, channel_key = await run_switchboard(group, scratch, args)
            base = await run_baseline(group, channel_url, channel_key, args)
        except Exception:
            for proc in group.procs.values():
                print(f"--- {proc.name} ({proc.log_path}) ---\n{processes.tail(proc.log_path, 20)}", flush=True)
            raise
        finally:
            group.stop_all()
            await admin.delete_topics(kafka)
    return [
        *measurements(real.summary, base.summary, BASELINE_LABEL),
        cpu_measurement(real, base),
    ]


def collect(args: argparse.Namespace) -> list[Measurement]:
    print(
        f"end-to-end: {args.rate:g} msg/s for {args.duration:g} s over {args.chats} chats "
        f"(warm-up {args.warmup:g} s); logs in {args.run_dir}",
        flush=True,
    )
    return asyncio.run(run(args))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0, help="messages per second, open loop")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of measured load")
    parser.add_argument("--chats", type=int, default=1000, help="conversations the messages go round-robin to")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of load (own chats) before measuring")
    parser.add_argument("--drain", type=float, default=60.0, help="seconds to wait for the last replies")
    parser.add_argument("--partitions", type=int, default=6, help="partitions of the conversation topics")
    parser.add_argument("--poll-interval", type=float, default=0.1, help="the baseline poller's interval, seconds")
    parser.add_argument(
        "--no-history",
        dest="history",
        action="store_false",
        help="start from empty tables (by default each database gets a past first: bench/e2e_history.py)",
    )
    parser.add_argument("--run-dir", type=Path, default=RUN_DIR, help="where the processes' logs go")
    add_common_arguments(parser, argv, smoke=SMOKE)
    args = parser.parse_args(argv)
    publish(collect(args), args.report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
