"""``make demo``: the local stack, then the five services started, probed and stopped.

The full demo conversation (webhook → dispatcher → runner → notifier, Home
digest) arrives with the service issues; until then the demo shows that the
stack is up, the topics and migrations are in place, and every service starts
healthy and stops cleanly.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from switchboard.kafka import admin
from switchboard.settings import DatabaseSettings, KafkaSettings

REPO_ROOT = Path(__file__).resolve().parent.parent
SERVICES = ("api", "dispatcher", "runner", "notifier", "brief")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _section(title: str) -> None:
    print(f"\n== {title}", flush=True)


def _stack_status() -> None:
    _section("local stack")
    subprocess.run(["bash", "scripts/stack/stack.sh", "status"], cwd=REPO_ROOT, check=True)


def _topics() -> None:
    _section("topics (registry vs broker)")
    for topic in asyncio.run(admin.describe_topics(KafkaSettings())):
        state = "ok" if topic["on_broker"] == topic["partitions"] else f"MISSING/WRONG ({topic['on_broker']})"
        print(f"  {topic['topic']:<22} key={topic['key']:<16} partitions={topic['partitions']:<3} {state}")


def _migrations() -> None:
    from sqlalchemy import create_engine, text

    _section("database")
    engine = create_engine(DatabaseSettings().migration_url)
    with engine.connect() as conn:
        revision = conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
        tables = conn.execute(text("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")).scalar_one()
        rls = conn.execute(
            text("SELECT count(*) FROM pg_class WHERE relrowsecurity AND relforcerowsecurity")
        ).scalar_one()
    engine.dispose()
    print(f"  migration head {revision}: {tables} tables, {rls} with forced row-level security")


def _services() -> bool:
    _section("services (start, probe, SIGTERM)")
    ok = True
    for service in SERVICES:
        port = _free_port()
        env = {
            **os.environ,
            ("API_PORT" if service == "api" else f"{service.upper()}_HEALTH_PORT"): str(port),
            "SWITCHBOARD_LOG_LEVEL": "WARNING",
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli", service],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        healthy = False
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                healthy = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
                break
            except httpx.TransportError:
                time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        ok = ok and healthy and code == 0
        print(f"  {service:<10} healthy={healthy!s:<5} exit={code}")
    return ok


def main() -> int:
    _stack_status()
    _topics()
    _migrations()
    ok = _services()
    _section("next")
    print("  settings:   var/stack.env")
    print("  a service:  .venv/bin/switchboard api   (then http://127.0.0.1:8000/docs)")
    print("  stop:       make down      wipe data: make clean")
    print(json.dumps({"demo": "ok" if ok else "failed"}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
