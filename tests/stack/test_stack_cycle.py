"""The local stack launcher: `make up` is idempotent and `make down` leaves nothing listening.

Runs a second, private stack on spare ports and its own data directory so the
stack the other tests use is never touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.ports import free_port, listening
from tests.support.stack import REPO_ROOT

pytestmark = [pytest.mark.stack, pytest.mark.timeout(600)]


@pytest.fixture
def private_stack_env() -> Iterator[dict[str, str]]:
    var_dir = Path(tempfile.mkdtemp(prefix="switchboard-stack-test-", dir="/var/tmp"))
    var_dir.chmod(0o755)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "DATABASE_"))},
        "SWITCHBOARD_VAR_DIR": str(var_dir),
        "SWITCHBOARD_KAFKA_PORT": str(free_port()),
        "SWITCHBOARD_KAFKA_CONTROLLER_PORT": str(free_port()),
        "SWITCHBOARD_KAFKA_SASL_PORT": str(free_port()),
        "SWITCHBOARD_PG_PORT": str(free_port()),
    }
    yield env
    subprocess.run(["bash", "scripts/stack/stack.sh", "clean"], cwd=REPO_ROOT, env=env, capture_output=True)
    shutil.rmtree(var_dir, ignore_errors=True)


def _make(target: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["make", "--no-print-directory", target], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, f"make {target} failed:\n{result.stdout}\n{result.stderr}"
    return result


def test_up_twice_down_up_down_leaves_nothing_listening(private_stack_env: dict[str, str]) -> None:
    env = private_stack_env
    ports = [
        int(env["SWITCHBOARD_KAFKA_PORT"]),
        int(env["SWITCHBOARD_KAFKA_CONTROLLER_PORT"]),
        int(env["SWITCHBOARD_KAFKA_SASL_PORT"]),
        int(env["SWITCHBOARD_PG_PORT"]),
    ]

    _make("up", env)
    assert all(listening(p) for p in ports)
    stack_env = (Path(env["SWITCHBOARD_VAR_DIR"]) / "stack.env").read_text()
    assert f"KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:{env['SWITCHBOARD_KAFKA_PORT']}" in stack_env
    assert f"@127.0.0.1:{env['SWITCHBOARD_PG_PORT']}/switchboard" in stack_env
    assert "DATABASE_OWNER_URL=" in stack_env
    assert f"SWITCHBOARD_KAFKA_SASL_BOOTSTRAP=127.0.0.1:{env['SWITCHBOARD_KAFKA_SASL_PORT']}" in stack_env

    second = _make("up", env)
    assert "already running" in second.stderr
    assert "configuration changed" not in second.stderr, "an unchanged config never restarts the broker"

    _make("down", env)
    assert not any(listening(p) for p in ports)

    _make("up", env)
    assert all(listening(p) for p in ports)
    _make("down", env)
    assert not any(listening(p) for p in ports)
