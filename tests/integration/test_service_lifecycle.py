"""Every service starts, logs JSON, answers its health probe and exits 0 on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from switchboard.kafka import admin
from switchboard.settings import KafkaSettings
from tests.support.ports import free_port
from tests.support.stack import REPO_ROOT, StackEndpoints

SWITCHBOARD = [sys.executable, "-m", "services.cli"]


def _wait_healthy(port: int, proc: subprocess.Popen[str], timeout_s: float = 30) -> httpx.Response:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "service exited early"
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
        except httpx.TransportError:
            time.sleep(0.2)
    raise AssertionError("service never answered /healthz")


@pytest.mark.parametrize("service", ["api", "dispatcher", "runner", "notifier", "brief"])
def test_service_starts_answers_health_and_stops_on_sigterm(
    service: str, stack: StackEndpoints, tmp_path: Path
) -> None:
    port = free_port()
    # Topics of its own: on the shared broker the unprefixed ones hold other tests' records, and a
    # service busy with that backlog is not what this test is about.
    kafka = KafkaSettings(bootstrap_servers=stack.kafka_bootstrap_servers, topic_prefix=f"life{uuid.uuid4().hex[:8]}.")
    asyncio.run(admin.ensure_topics(kafka))
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": stack.kafka_bootstrap_servers,
        "KAFKA_TOPIC_PREFIX": kafka.topic_prefix,
        "DATABASE_URL": stack.database_url,
        "API_PORT" if service == "api" else f"{service.upper()}_HEALTH_PORT": str(port),
    }
    # Its logs to a file, never to a pipe nobody reads while it runs: a service logging more than a
    # pipe holds (64 KB: the brief's morning pass over a shared database's many orgs) blocked on the
    # write, its loop stopped, and it "never became ready".
    log_file = (tmp_path / f"{service}.log").open("w+")
    proc = subprocess.Popen(
        [*SWITCHBOARD, service], cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log_file, text=True
    )
    try:
        response = _wait_healthy(port, proc)
        assert response.status_code == 200
        if service == "api":
            assert response.headers.get("X-Request-Id")
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
        assert metrics.status_code == 200
        # Stop a service that finished starting (the dispatcher first reads the published agents).
        deadline = time.monotonic() + 30
        while httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code != 200:
            assert time.monotonic() < deadline, f"{service} never became ready"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        asyncio.run(admin.delete_topics(kafka))
    log_file.seek(0)
    log_lines = [json.loads(line) for line in log_file.read().splitlines() if line.startswith("{")]
    log_file.close()
    events = [line["event"] for line in log_lines]
    assert "service started" in events and "service stopped" in events, events
    assert all(line["level"] in {"debug", "info", "warning", "error", "critical"} for line in log_lines)
