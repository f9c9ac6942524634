"""A private Kafka broker for one chaos module, so restarting it disturbs nobody on the shared one.

It is the stack's own broker (scripts/stack/kafka.sh, jars cached in ~/.cache/switchboard)
with its own ports and var dir under the test's tmp dir; ``stop`` then ``start`` is a real
broker restart (SIGTERM, wait until both ports close, start again on the same data).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from scripts.demo.processes import REPO_ROOT, pick_port

KAFKA_SH = REPO_ROOT / "scripts" / "stack" / "kafka.sh"


@dataclass
class PrivateBroker:
    var_dir: Path
    port: int
    controller_port: int
    sasl_port: int

    @classmethod
    def create(cls, var_dir: Path) -> PrivateBroker:
        ports: list[int] = []
        while len(ports) < 3:  # the client, controller and SASL listeners, all distinct
            candidate = pick_port()
            if candidate not in ports:
                ports.append(candidate)
        return cls(var_dir, *ports)

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.var_dir / "kafka" / "logs" / "stdout.log"

    def _run(self, action: str) -> None:
        env = {
            **os.environ,
            "SWITCHBOARD_VAR_DIR": str(self.var_dir),
            "SWITCHBOARD_KAFKA_PORT": str(self.port),
            "SWITCHBOARD_KAFKA_CONTROLLER_PORT": str(self.controller_port),
            "SWITCHBOARD_KAFKA_SASL_PORT": str(self.sasl_port),
            "SWITCHBOARD_KAFKA_HEAP": os.environ.get("CHAOS_KAFKA_HEAP", "384m"),
        }
        done = subprocess.run(
            ["bash", str(KAFKA_SH), action], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"kafka.sh {action} failed ({done.returncode}): {done.stderr[-2000:]}")

    def start(self) -> None:
        self._run("start")

    def stop(self) -> None:
        self._run("stop")
