"""``python -m scripts.demo.supervise``: keeps the demo's workers running, as Kubernetes would.

A worker may exit on purpose and rely on its orchestrator to start it again — the dispatcher
exits with code 70 when a batch cannot be committed (docs/chaos.md finding 3), say after a long
broker outage. ``make demo`` leaves its processes running for exploration with no orchestrator
around them, so the demo starts this small supervisor with them: every second it looks at each
worker's pid file (``var/demo/pids/<name>.pid``) and starts again a worker whose process is gone,
with the same command line and environment, its log appended to, at most
``MAX_RESTARTS`` times in ``RESTART_WINDOW_S``.

Stopping is unchanged: ``make down`` / ``python -m scripts.demo stop`` stop every process of
the pid files (this one's among them) and delete the files; a worker whose pid file is gone
is being stopped, never restarted. The spec (names, commands, environment) arrives on stdin
as JSON, so the environment — provider keys among it — is never written to disk.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

MAX_RESTARTS: Final = 5
RESTART_WINDOW_S: Final = 600.0
POLL_S: Final = 1.0


@dataclass
class Worker:
    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    restarts: deque[float] = field(default_factory=deque)


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (a dead worker of ours would be one until reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


class Supervisor:
    def __init__(self, run_dir: Path, workers: list[Worker], *, cwd: Path, log: Path) -> None:
        self._pids = run_dir / "pids"
        self._workers = workers
        self._cwd = cwd
        self._log = log
        self._stopping = False

    def note(self, event: str, **fields: Any) -> None:
        with self._log.open("a") as out:
            out.write(json.dumps({"ts": time.time(), "event": event, **fields}) + "\n")

    def stop(self, *_: object) -> None:
        self._stopping = True

    def check_once(self) -> list[str]:
        """Start again every worker whose process is gone; the names restarted."""
        restarted: list[str] = []
        for worker in self._workers:
            pid_file = self._pids / f"{worker.name}.pid"
            pid = read_pid(pid_file)
            if pid is None or alive(pid) or self._stopping:
                continue  # no pid file: being stopped (or never started); alive: nothing to do
            now = time.monotonic()
            while worker.restarts and now - worker.restarts[0] > RESTART_WINDOW_S:
                worker.restarts.popleft()
            if len(worker.restarts) >= MAX_RESTARTS:
                continue  # it keeps dying: its log says why; the supervisor does not loop on it
            with worker.log_path.open("ab") as out:
                popen = subprocess.Popen(
                    worker.argv,
                    cwd=self._cwd,
                    env=worker.env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            if not pid_file.exists():  # a stop began meanwhile: undo, it must not outlive the stop
                popen.terminate()
                continue
            pid_file.write_text(f"{popen.pid}\n")
            worker.restarts.append(now)
            restarted.append(worker.name)
            self.note("worker restarted", worker=worker.name, old_pid=pid, pid=popen.pid)
        return restarted

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        self.note("supervising", workers=[w.name for w in self._workers])
        while not self._stopping:
            self.check_once()
            # Reap the workers this process started (and that died again): no zombies.
            try:
                while os.waitpid(-1, os.WNOHANG)[0]:
                    pass
            except ChildProcessError:
                pass
            time.sleep(POLL_S)
        self.note("stopped")


def spec(raw: str) -> tuple[Path, Path, list[Worker]]:
    data = json.loads(raw)
    env = {str(k): str(v) for k, v in data["env"].items()}
    workers = [
        Worker(w["name"], list(w["argv"]), {**env, **w.get("extra_env", {})}, Path(w["log_path"]))
        for w in data["workers"]
    ]
    return Path(data["run_dir"]), Path(data["cwd"]), workers


def main() -> int:
    run_dir, cwd, workers = spec(sys.stdin.read())
    Supervisor(run_dir, workers, cwd=cwd, log=run_dir / "logs" / "supervisor.log").run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
