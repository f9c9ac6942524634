"""The demo's supervisor (scripts/demo/supervise.py) as a real process: a worker that dies is
started again with its command line; a worker being stopped (its pid file gone) is not; and
``stop_previous`` stops the supervisor with the rest, so nothing comes back after ``make down``."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from scripts.demo import processes
from scripts.demo.supervise import alive, read_pid

# A stand-in worker: sleeps; its argv names a module of ours so stop_previous recognises it.
SLEEPER = [sys.executable, "-c", "import sys, time; time.sleep(600)", "services.cli", "stand-in"]


def _eventually(condition: Callable[[], bool], timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@pytest.fixture
def group(tmp_path: Path) -> Iterator[processes.ProcessGroup]:
    group = processes.ProcessGroup(tmp_path, dict(os.environ))
    group.start("worker", SLEEPER, "http://127.0.0.1:9/healthz")
    processes.start_supervisor(group)
    yield group
    processes.stop_previous(tmp_path, timeout_s=5)


def _pid(group: processes.ProcessGroup, name: str) -> int | None:
    return read_pid(group.pids_dir / f"{name}.pid")


def test_a_worker_that_dies_is_started_again_with_its_command_line(group: processes.ProcessGroup) -> None:
    first = _pid(group, "worker")
    assert first is not None
    os.kill(first, signal.SIGKILL)
    group.procs["worker"].popen.wait(timeout=5)
    assert _eventually(lambda: _pid(group, "worker") not in (None, first)), "the worker was not restarted"
    second = _pid(group, "worker")
    assert second is not None and alive(second)
    cmdline = Path(f"/proc/{second}/cmdline").read_bytes().split(b"\0")
    assert [part.decode() for part in cmdline if part] == SLEEPER
    log = (group.logs_dir / "supervisor.log").read_text()
    assert '"worker restarted"' in log and f'"old_pid": {first}' in log


def test_a_worker_being_stopped_is_not_started_again(group: processes.ProcessGroup) -> None:
    pid = _pid(group, "worker")
    assert pid is not None
    (group.pids_dir / "worker.pid").unlink()  # what stop_previous / make down does first
    os.kill(pid, signal.SIGTERM)
    group.procs["worker"].popen.wait(timeout=5)
    time.sleep(3)  # three supervisor rounds
    assert not (group.pids_dir / "worker.pid").exists()
    assert "worker restarted" not in (group.logs_dir / "supervisor.log").read_text()


def test_stop_previous_stops_the_supervisor_and_nothing_comes_back(group: processes.ProcessGroup) -> None:
    supervisor = _pid(group, processes.SUPERVISOR)
    worker = _pid(group, "worker")
    assert supervisor is not None and alive(supervisor) and worker is not None
    stopped = processes.stop_previous(group.run_dir, timeout_s=5)
    assert set(stopped) == {processes.SUPERVISOR, "worker"}
    group.procs["worker"].popen.wait(timeout=5)
    time.sleep(2)
    assert not alive(supervisor) and not alive(worker)
    assert list(group.pids_dir.glob("*.pid")) == []


def test_the_channel_servers_key_goes_through_the_environment_it_reads() -> None:
    """The demo passes the key in the environment (``ps`` shows command lines to every local user)."""
    from scripts import channel_server

    assert processes.CHANNEL_SERVER_KEY_ENV == channel_server.API_KEY_ENV
