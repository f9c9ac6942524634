"""``make bench-api``: WAHA webhook ingest vs a bare FastAPI JSON endpoint, side by side.

What it does, in one run:

1. creates a throwaway organization and a channel session (with its webhook secret)
   in the local stack's database (``make up``);
2. pre-signs unique WAHA ``message`` deliveries (HMAC-SHA512, as WAHA sends them)
   spread over a pool of chats, into files wrk replays (``bench/ingest.lua``);
3. starts the real API (``python -m services.api``) and the bare app
   (``python -m bench.bare_app``) as subprocesses with the same uvicorn settings
   (one process each);
4. warms both up, then drives each for ``--duration`` seconds with wrk on loopback,
   ``--rounds`` times alternating, and reports requests/s and p50/p99 latency (median
   round) and the ratio ingest / bare;
5. checks that every ingest answer was a 2xx and that the messages really are in
   the database, then deletes the organization and its outbox rows so no relay
   ever publishes benchmark traffic.

It is not a test: numbers depend on the machine; docs/benchmarks.md records them.
Needs ``wrk`` (Debian: ``apt-get install -y wrk``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from bench.report import Goal, Measurement, add_common_arguments, publish
from services.api.channels.service import create_session
from services.api.identity.service import bootstrap_organization
from services.api.settings import ApiSettings
from services.api.webhooks.service import sign
from switchboard.crypto import KeyRing
from switchboard.db.session import create_engine, set_tenant

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "var" / "bench"
LUA = Path(__file__).resolve().parent / "ingest.lua"
WEBHOOK_PATH = "/api/v1/webhooks/waha"
BARE_PATH = "/bare"
BARE_DB_PATH = "/bare-db"
GOAL_RATIO = 0.30


@dataclass
class WrkResult:
    requests: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    non_2xx: int
    socket_errors: int
    # CPU spent during the run per request: the server process, all PostgreSQL processes.
    server_cpu_ms: float = 0.0
    postgres_cpu_ms: float = 0.0
    # Share of the machine's CPU time that was busy during the run (all processes).
    machine_busy: float = 0.0


@dataclass
class Fixture:
    org_id: uuid.UUID
    channel_session_id: uuid.UUID
    external_session: str
    secret: str


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ms(value: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", value.strip())
    if match is None:
        raise ValueError(f"unexpected wrk latency {value!r}")
    number, unit = float(match.group(1)), match.group(2)
    return number * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def parse_wrk(output: str) -> WrkResult:
    def grab(pattern: str, default: str | None = None) -> str:
        found = re.search(pattern, output, re.MULTILINE)
        if found is None:
            if default is None:
                raise ValueError(f"wrk output lacks {pattern!r}:\n{output}")
            return default
        return found.group(1)

    socket_errors = sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", output))
    return WrkResult(
        requests=int(grab(r"^\s*(\d+) requests in")),
        seconds=float(_ms(grab(r"requests in ([\d.]+\w+),")) / 1000),
        rps=float(grab(r"^Requests/sec:\s+([\d.]+)")),
        p50_ms=_ms(grab(r"^\s+50%\s+(\S+)")),
        p99_ms=_ms(grab(r"^\s+99%\s+(\S+)")),
        non_2xx=int(grab(r"Non-2xx or 3xx responses: (\d+)", "0")),
        socket_errors=socket_errors,
    )


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _process_cpu(pid: int) -> float:
    """User + system CPU seconds of one process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _postgres_cpu() -> dict[int, float]:
    """CPU seconds per live PostgreSQL process (backends come and go, so runs compare per pid)."""
    found: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() in ("postgres", "postmaster"):
                    found[int(entry.name)] = _process_cpu(int(entry.name))
            except OSError:
                continue
    return found


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values) - idle, sum(values)


def run_wrk(
    url: str, requests_file: Path, *, threads: int, connections: int, duration: float, server_pid: int | None = None
) -> WrkResult:
    command = [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{max(1, round(duration))}s",
        "--latency",
        "--timeout",
        "10s",
        "-s",
        str(LUA),
        url,
        "--",
        str(requests_file),
        str(threads),
    ]
    server_before = _process_cpu(server_pid) if server_pid else 0.0
    postgres_before = _postgres_cpu()
    busy_before, total_before = _machine_ticks()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr or done.stdout}")
    busy_after, total_after = _machine_ticks()
    result = parse_wrk(done.stdout)
    if result.requests:
        per_request = 1000 / result.requests
        if server_pid:
            result.server_cpu_ms = round((_process_cpu(server_pid) - server_before) * per_request, 3)
        postgres_after = _postgres_cpu()
        spent = sum(max(0.0, cpu - postgres_before.get(pid, 0.0)) for pid, cpu in postgres_after.items())
        result.postgres_cpu_ms = round(spent * per_request, 3)
    if total_after > total_before:
        result.machine_busy = round((busy_after - busy_before) / (total_after - total_before), 3)
    return result


def create_fixture(settings: ApiSettings) -> Fixture:
    engine = create_engine(settings.database.url.get_secret_value(), pool_size=1)
    keyring = KeyRing.from_settings(settings.runtime)
    name = f"bench-{uuid.uuid4().hex[:12]}"
    try:
        with Session(engine) as session, session.begin():
            org_id, _, _ = bootstrap_organization(
                session, org_name="Benchmark (safe to delete)", email=f"{name}@bench.invalid"
            )
            set_tenant(session, org_id)
            issued = create_session(
                session,
                keyring,
                org_id=org_id,
                actor_user_id=None,
                label="benchmark",
                external_session=name,
                phone_number=None,
                base_url=None,
                api_key=None,
                request_id=None,
            )
            return Fixture(org_id, issued.row.id, name, issued.webhook_secret)
    finally:
        engine.dispose()


def write_deliveries(path: Path, fixture: Fixture, *, count: int, chats: int) -> None:
    """One unique, signed ``message`` delivery per line: ``<signature>\\t<body>``."""
    now = int(time.time())
    with path.open("w") as out:
        for i in range(count):
            chat = f"5511{(i % chats):09d}@c.us"
            event = {
                "id": f"evt_{uuid.uuid4().hex}",
                "timestamp": now * 1000,
                "event": "message",
                "session": fixture.external_session,
                "payload": {
                    "id": f"false_{chat}_{uuid.uuid4().hex.upper()}",
                    "timestamp": now,
                    "from": chat,
                    "fromMe": False,
                    "to": "5511900000000@c.us",
                    "body": "Olá! Vocês abrem amanhã? Queria agendar um horário para as 15h.",
                    "hasMedia": False,
                },
            }
            raw = json.dumps(event, separators=(",", ":"))
            out.write(f"{sign(fixture.secret, raw.encode())}\t{raw}\n")


def count_stored(settings: ApiSettings, fixture: Fixture) -> tuple[int, int]:
    """(messages stored for the bench session, their dispatch_requested outbox rows)."""
    engine = create_engine(settings.database.url.get_secret_value(), pool_size=1)
    try:
        with Session(engine) as session, session.begin():
            set_tenant(session, fixture.org_id)
            messages = session.execute(
                text("SELECT count(*) FROM messages WHERE channel_session_id = :s"), {"s": fixture.channel_session_id}
            ).scalar_one()
            dispatches = session.execute(
                text(
                    "SELECT count(*) FROM outbox WHERE topic = 'dispatch_requested' AND key IN "
                    "(SELECT convert_to(c.id::text, 'UTF8') FROM conversations c WHERE c.channel_session_id = :s)"
                ),
                {"s": fixture.channel_session_id},
            ).scalar_one()
            return int(messages), int(dispatches)
    finally:
        engine.dispose()


def clean_up(settings: ApiSettings, fixture: Fixture) -> str:
    """Delete the benchmark's outbox rows (never to be relayed) and its organization."""
    engine = create_engine(settings.database.url.get_secret_value(), pool_size=1)
    try:
        with Session(engine) as session, session.begin():
            set_tenant(session, fixture.org_id)
            session.execute(
                text(
                    "DELETE FROM outbox WHERE topic = 'dispatch_requested' AND key IN "
                    "(SELECT convert_to(c.id::text, 'UTF8') FROM conversations c WHERE c.channel_session_id = :s)"
                ),
                {"s": fixture.channel_session_id},
            )
        try:
            with Session(engine) as session, session.begin():
                set_tenant(session, fixture.org_id)
                for table in ("messages", "conversations", "contacts", "channel_sessions"):
                    session.execute(text(f"DELETE FROM {table} WHERE org_id = :o"), {"o": fixture.org_id})
                session.execute(text("DELETE FROM organizations WHERE id = :o"), {"o": fixture.org_id})
            return "organization deleted"
        except Exception as exc:
            return f"outbox rows deleted; organization {fixture.org_id} left in place ({type(exc).__name__})"
    finally:
        engine.dispose()


@contextmanager
def serve(command: list[str], env: dict[str, str], probe: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as log_file:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"{command} exited with {process.returncode}; see {log}")
                try:
                    if httpx.get(probe, timeout=1).status_code < 500:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{command} did not answer {probe} within 30 s; see {log}")
                time.sleep(0.2)
            yield process
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def machine_facts() -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    wrk_version = subprocess.run(["wrk", "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    import fastapi
    import sqlalchemy
    import uvicorn

    return {
        "cpus": str(os.cpu_count()),
        "cpu": cpu,
        "python": platform.python_version(),
        "uvicorn": uvicorn.__version__,
        "fastapi": fastapi.__version__,
        "sqlalchemy": sqlalchemy.__version__,
        "wrk": wrk_version.strip(),
    }


def median_result(results: list[WrkResult]) -> WrkResult:
    ordered = sorted(results, key=lambda r: r.rps)
    return ordered[len(ordered) // 2]


SMOKE = {"duration": 1.0, "warmup": 1.0, "rounds": 1, "connections": 4, "chats": 50, "per_second": 500}


def mean_batch_size(api_url: str) -> str:
    """How many deliveries the API's group commit wrote per transaction, from its /metrics."""
    text = httpx.get(f"{api_url}/metrics", timeout=10).text
    values = {
        name: float(value)
        for name, _, value in (line.partition(" ") for line in text.splitlines())
        if name in ("switchboard_webhook_batch_size_sum", "switchboard_webhook_batch_size_count")
    }
    count = values.get("switchboard_webhook_batch_size_count", 0.0)
    if not count:
        return "no batch recorded"
    deliveries = values["switchboard_webhook_batch_size_sum"]
    return f"{count:.0f} for {deliveries:.0f} deliveries, {deliveries / count:.1f} per transaction on average"


def measurements(bare: WrkResult, bare_db: WrkResult, ingest: WrkResult) -> list[Measurement]:
    """The run's figures against the bare FastAPI endpoint (stable metric names: docs/benchmarks.md)."""
    baseline = "bare FastAPI endpoint"
    return [
        Measurement.of(
            "api.ingest.throughput",
            ingest.rps,
            "req/s",
            baseline=baseline,
            baseline_value=bare.rps,
            goal=Goal("ratio", ">=", GOAL_RATIO),
        ),
        Measurement.of("api.ingest.latency.p99", ingest.p99_ms, "ms", baseline=baseline, baseline_value=bare.p99_ms),
        Measurement.of(
            "api.ingest.cpu_per_request",
            ingest.server_cpu_ms,
            "ms",
            baseline=baseline,
            baseline_value=bare.server_cpu_ms,
        ),
        Measurement.of("api.bare_db.throughput", bare_db.rps, "req/s", baseline=baseline, baseline_value=bare.rps),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per measured run")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds of warm-up per server")
    parser.add_argument("--rounds", type=int, default=1, help="measured runs per server (median is reported)")
    parser.add_argument("--threads", type=int, default=1, help="wrk threads")
    parser.add_argument("--connections", type=int, default=16, help="concurrent connections")
    parser.add_argument("--chats", type=int, default=1000, help="distinct customers the deliveries come from")
    parser.add_argument("--per-second", type=int, default=4000, help="deliveries pre-signed per second of load")
    parser.add_argument(
        "--pool-size", type=int, default=None, help="DATABASE_POOL_SIZE of the API (default: connections + 4)"
    )
    parser.add_argument(
        "--db-socket",
        default=None,
        help="connect both servers to PostgreSQL through this Unix-socket directory (e.g. var/postgres/run)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the benchmark organization and outbox rows")
    add_common_arguments(parser, argv, SMOKE)
    args = parser.parse_args(argv)

    if shutil.which("wrk") is None:
        print("wrk is not installed (Debian/Ubuntu: apt-get install -y wrk)", file=sys.stderr)
        return 2
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    load_before = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    settings = ApiSettings()
    fixture = create_fixture(settings)
    files = {
        "warmup": OUT_DIR / "deliveries-warmup.tsv",
        **{f"round{i}": OUT_DIR / f"deliveries-{i}.tsv" for i in range(args.rounds)},
    }
    for name, path in files.items():
        count = int(args.per_second * (args.warmup if name == "warmup" else args.duration))
        write_deliveries(path, fixture, count=count, chats=args.chats)

    api_port, bare_port = free_port(), free_port()
    pool_size = args.pool_size or args.connections + 4
    env = {
        **os.environ,
        "API_HOST": "127.0.0.1",
        "API_PORT": str(api_port),
        # Measure ingest, not the relay: it would also publish benchmark traffic to Kafka.
        "API_OUTBOX_RELAY": "false",
        # One pooled connection per concurrent request: no connect/disconnect churn.
        "DATABASE_POOL_SIZE": str(pool_size),
    }
    if args.db_socket:
        socket_dir = str(Path(args.db_socket).resolve())
        db_url = make_url(settings.database.url.get_secret_value())
        env["DATABASE_URL"] = db_url.set(host=None, query={**db_url.query, "host": socket_dir}).render_as_string(
            hide_password=False
        )
    api_url, bare_url = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{bare_port}"
    wrk_opts = {"threads": args.threads, "connections": args.connections}
    targets = {
        "bare": bare_url + BARE_PATH,
        "bare_db": bare_url + BARE_DB_PATH,
        "ingest": api_url + WEBHOOK_PATH,
    }
    results: dict[str, list[WrkResult]] = {name: [] for name in targets}
    try:
        with (
            serve([sys.executable, "-m", "services.api"], env, f"{api_url}/healthz", OUT_DIR / "api.log") as api,
            serve(
                [sys.executable, "-m", "bench.bare_app", str(bare_port)],
                env,
                f"{bare_url}/openapi.json",
                OUT_DIR / "bare.log",
            ) as bare_server,
        ):
            pids = {"bare": bare_server.pid, "bare_db": bare_server.pid, "ingest": api.pid}
            warmups = {
                name: run_wrk(url, files["warmup"], duration=args.warmup, server_pid=pids[name], **wrk_opts)
                for name, url in targets.items()
            }
            for i in range(args.rounds):
                for name, url in targets.items():
                    results[name].append(
                        run_wrk(url, files[f"round{i}"], duration=args.duration, server_pid=pids[name], **wrk_opts)
                    )
            batches = mean_batch_size(api_url)
        stored, dispatched = count_stored(settings, fixture)
    finally:
        cleanup = "kept (--keep)" if args.keep else clean_up(settings, fixture)
        for path in files.values():
            path.unlink(missing_ok=True)

    print(f"ingest transactions: {batches}")
    ingest = results["ingest"]
    b, d, g = (median_result(results[name]) for name in ("bare", "bare_db", "ingest"))
    ratio = g.rps / b.rps if b.rps else 0.0
    ingest_runs = [warmups["ingest"], *ingest]
    ingest_non_2xx = sum(r.non_2xx for r in ingest_runs)
    # wrk counts the answers it read before its deadline; requests still in flight then were
    # ingested too, so the database may hold up to one more per connection and run.
    answered = sum(r.requests - r.non_2xx for r in ingest_runs)
    consistent = answered <= stored <= answered + args.connections * len(ingest_runs) and dispatched == stored
    report: dict[str, object] = {
        "machine": machine_facts(),
        "settings": {
            **{k: (str(v) if k == "report" else v) for k, v in vars(args).items() if k != "keep"},
            "pool_size": pool_size,
        },
        "database_transport": "unix socket" if args.db_socket else "tcp loopback",
        "load_average_before": load_before,
        "bare": asdict(b),
        "bare_db": asdict(d),
        "ingest": asdict(g),
        "ratio": round(ratio, 3),
        "ratio_bare_db": round(d.rps / b.rps, 3) if b.rps else 0.0,
        "ratio_ingest_to_bare_db": round(g.rps / d.rps, 3) if d.rps else 0.0,
        "goal": GOAL_RATIO,
        "checks": {
            "ingest_non_2xx": ingest_non_2xx,
            "ingest_answered_2xx": answered,
            "stored_matches_answers": consistent,
            "messages_stored": stored,
            "dispatch_rows": dispatched,
            "cleanup": cleanup,
        },
        "rounds": {name: [asdict(r) for r in runs] for name, runs in results.items()},
    }
    (OUT_DIR / "api_ingest.json").write_text(json.dumps(report, indent=2))

    print(f"machine: {report['machine']}")
    print(f"load: wrk {args.threads} thread(s), {args.connections} connections, {args.duration:g} s x {args.rounds}")
    print(
        f"{'':26}{'requests/s':>12}{'p50 ms':>9}{'p99 ms':>9}{'requests':>10}{'non-2xx':>8}"
        f"{'server CPU ms/req':>19}{'PG CPU ms/req':>15}{'machine busy':>14}"
    )
    for label, r in (("bare FastAPI", b), ("bare + one DB transaction", d), ("webhook ingest", g)):
        print(
            f"{label:26}{r.rps:>12.0f}{r.p50_ms:>9.2f}{r.p99_ms:>9.2f}{r.requests:>10}{r.non_2xx:>8}"
            f"{r.server_cpu_ms:>19.2f}{r.postgres_cpu_ms:>15.2f}{r.machine_busy:>14.0%}"
        )
    verdict = "meets" if ratio >= GOAL_RATIO else "BELOW"
    print(f"ratio ingest/bare: {ratio:.1%} ({verdict} the {GOAL_RATIO:.0%} goal)")
    print(f"ratio bare+DB/bare: {d.rps / b.rps:.1%}; ingest/bare+DB: {g.rps / d.rps:.1%}")
    print(
        f"ingest answers 2xx: {answered}, messages stored: {stored}, dispatch_requested outbox rows: {dispatched}"
        f" ({'consistent' if consistent else 'INCONSISTENT'}); cleanup: {cleanup}"
    )
    print(f"full report: {OUT_DIR / 'api_ingest.json'}")
    publish(measurements(b, d, g), args.report)
    return 0 if ingest_non_2xx == 0 and consistent else 1


if __name__ == "__main__":
    sys.exit(main())
