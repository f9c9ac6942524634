"""The API as a real process (``switchboard api``), for tests that talk HTTP to it from outside."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from switchboard.settings import KafkaSettings
from tests.support.ports import free_port
from tests.support.stack import REPO_ROOT, StackEndpoints
from tests.support.subprocesses import terminate


@contextmanager
def live_api(stack: StackEndpoints, kafka: KafkaSettings, **extra_env: str) -> Iterator[str]:
    """Start ``switchboard api`` on a free port; yield its base URL; SIGTERM it afterwards."""
    port = free_port()
    env = {
        **os.environ,
        "API_PORT": str(port),
        "KAFKA_BOOTSTRAP_SERVERS": stack.kafka_bootstrap_servers,
        "KAFKA_TOPIC_PREFIX": kafka.topic_prefix,
        "DATABASE_URL": stack.database_url,
        "SWITCHBOARD_LOG_LEVEL": "WARNING",
        **extra_env,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "api"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"api exited: {proc.stderr.read() if proc.stderr else ''}")
            try:
                if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("api did not become healthy in 30 s")
            time.sleep(0.2)
        yield base_url
    finally:
        terminate(proc)
