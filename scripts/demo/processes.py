"""The demo's processes: the five services, the channel server and (if the API does not mount it) the MCP server.

Each runs as its own detached process (its own session, so it outlives ``make demo``
and a Ctrl-C of it), logs to ``<run_dir>/logs/<name>.log`` and leaves its pid in
``<run_dir>/pids/<name>.pid``. ``make down`` (scripts/stack/stack.sh) and the next
``make demo`` stop them from those files; a pid is only signalled when its command
line is still one of ours, so a recycled pid is never killed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("api", "dispatcher", "runner", "notifier", "brief")
# What a command line of ours contains; anything else behind a stale pid file is left alone.
OUR_COMMANDS = ("services.cli", "scripts.channel_server", "services.api.mcp", "scripts.demo.supervise")
# The demo's supervisor (scripts/demo/supervise.py): its pid file is ``<run_dir>/pids/supervisor.pid``.
SUPERVISOR = "supervisor"
CHANNEL_SERVER_MODULE = "scripts.channel_server"
# Its key, through the environment (scripts/channel_server.py ``API_KEY_ENV``; not imported: the
# channel server is optional here).
CHANNEL_SERVER_KEY_ENV = "CHANNEL_SERVER_API_KEY"


def port_free(port: int) -> bool:
    """Nothing listens on ``port`` (SO_REUSEADDR like the servers: a just-stopped demo's TIME_WAIT is free)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pick_port(preferred: int | None = None) -> int:
    """``preferred`` when nothing listens there, else any free port."""
    if preferred and port_free(preferred):
        return preferred
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    health_url: str
    log_path: Path
    # How it was started, so a chaos test can start it again (``ProcessGroup.restart``).
    argv: list[str] = field(default_factory=list)
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def ready_url(self) -> str:
        """A service's readiness probe (its consumers joined their groups); others: the health URL."""
        return self.health_url.replace("/healthz", "/readyz")


@dataclass
class ProcessGroup:
    """The processes one demo (or one e2e test) started; ``run_dir`` holds their logs and pid files."""

    run_dir: Path
    env: Mapping[str, str]
    procs: dict[str, Proc] = field(default_factory=dict)

    @property
    def logs_dir(self) -> Path:
        return self.run_dir / "logs"

    @property
    def pids_dir(self) -> Path:
        return self.run_dir / "pids"

    def start(
        self,
        name: str,
        argv: list[str],
        health_url: str,
        extra_env: Mapping[str, str] | None = None,
        *,
        log_mode: str = "wb",
    ) -> Proc:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.pids_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.logs_dir / f"{name}.log"
        with log_path.open(log_mode) as log:  # each demo starts its logs afresh ("wb")
            popen = subprocess.Popen(
                argv,
                cwd=REPO_ROOT,
                env={**self.env, **(extra_env or {})},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        (self.pids_dir / f"{name}.pid").write_text(f"{popen.pid}\n")
        proc = Proc(name, popen, health_url, log_path, list(argv), dict(extra_env or {}))
        self.procs[name] = proc
        return proc

    def kill(self, name: str, sig: int = signal.SIGKILL, timeout_s: float = 30.0) -> int:
        """Send ``sig`` to ``name`` (the chaos tests' SIGKILL) and wait for it to exit; its exit code."""
        proc = self.procs[name]
        proc.popen.send_signal(sig)
        return proc.popen.wait(timeout=timeout_s)

    def restart(self, name: str) -> Proc:
        """Start the exited ``name`` again with the argv and env it had; its log goes on."""
        old = self.procs[name]
        if old.popen.poll() is None:
            raise RuntimeError(f"{name} is still running (pid {old.popen.pid})")
        return self.start(name, old.argv, old.health_url, old.extra_env, log_mode="ab")

    def start_service(self, service: str, port: int, extra_env: Mapping[str, str] | None = None) -> Proc:
        port_env = "API_PORT" if service == "api" else f"{service.upper()}_HEALTH_PORT"
        return self.start(
            service,
            [sys.executable, "-m", "services.cli", service],
            f"http://127.0.0.1:{port}/healthz",
            {port_env: str(port), **(extra_env or {})},
        )

    def wait_healthy(
        self, name: str, timeout_s: float = 60.0, ok_statuses: tuple[int, ...] = (200,), *, ready: bool = False
    ) -> None:
        """Poll the health URL (``ready``: the readiness URL) until it answers ``ok_statuses``; raise with
        the log's tail if the process died or the deadline passed."""
        proc = self.procs[name]
        url = proc.ready_url if ready else proc.health_url
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.popen.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.popen.returncode}:\n{tail(proc.log_path)}")
            try:
                if httpx.get(url, timeout=1).status_code in ok_statuses:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{name} not healthy at {url} after {timeout_s:.0f} s:\n{tail(proc.log_path)}")

    def stop_all(self, timeout_s: float = 30.0) -> dict[str, int | None]:
        """SIGTERM everything (reverse start order), wait, SIGKILL what is left; the exit codes by name."""
        for proc in reversed(list(self.procs.values())):
            if proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        codes: dict[str, int | None] = {}
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                codes[name] = proc.popen.wait()
            (self.pids_dir / f"{name}.pid").unlink(missing_ok=True)
        self.procs.clear()
        return codes


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _ours(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return any(marker in cmdline for marker in OUR_COMMANDS)


def start_supervisor(group: ProcessGroup) -> subprocess.Popen[bytes]:
    """Keep the group's processes running after ``make demo`` returns, as Kubernetes would
    (scripts/demo/supervise.py). The spec goes over stdin: the environment holds provider keys."""
    spec = {
        "run_dir": str(group.run_dir),
        "cwd": str(REPO_ROOT),
        "env": dict(group.env),
        "workers": [
            {"name": p.name, "argv": p.argv, "extra_env": p.extra_env, "log_path": str(p.log_path)}
            for p in group.procs.values()
        ],
    }
    group.logs_dir.mkdir(parents=True, exist_ok=True)
    with (group.logs_dir / f"{SUPERVISOR}.out").open("wb") as out:
        popen = subprocess.Popen(
            [sys.executable, "-m", "scripts.demo.supervise"],
            cwd=REPO_ROOT,
            env=dict(group.env),
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    assert popen.stdin is not None
    popen.stdin.write(json.dumps(spec).encode())
    popen.stdin.close()
    (group.pids_dir / f"{SUPERVISOR}.pid").write_text(f"{popen.pid}\n")
    return popen


def _stop_order(pid_file: Path) -> tuple[bool, str]:
    """The supervisor first, so that it never starts again what is being stopped."""
    return (pid_file.stem != SUPERVISOR, pid_file.stem)


def stop_previous(run_dir: Path, timeout_s: float = 30.0) -> list[str]:
    """Stop the processes a previous demo left (from its pid files); the names of those stopped."""
    pids: dict[str, int] = {}
    for pid_file in sorted((run_dir / "pids").glob("*.pid"), key=_stop_order):
        try:
            pid = int(pid_file.read_text().strip())
        except ValueError:
            pid = 0
        if pid and _ours(pid):
            pids[pid_file.stem] = pid
            os.kill(pid, signal.SIGTERM)
        pid_file.unlink(missing_ok=True)
    deadline = time.monotonic() + timeout_s
    for pid in pids.values():
        while _ours(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _ours(pid):
            os.kill(pid, signal.SIGKILL)
    return sorted(pids)


# Where the demo listens when the port is free (the README and the API docs link name them);
# the e2e tests pass ``preferred=False`` and get free ports.
DEMO_PORTS = {
    "api": 8000,
    "channel": 3000,
    "mcp": 8100,
    "dispatcher": 9101,
    "runner": 9102,
    "notifier": 9103,
    "brief": 9104,
}


@dataclass(frozen=True)
class Topology:
    api_url: str
    channel_url: str | None  # None: scripts/channel_server.py is not there yet
    mcp_url: str
    mcp_mounted: bool  # True: served by the API at /internal/mcp; False: its own process
    metrics_urls: dict[str, str]


def channel_server_available() -> bool:
    import importlib.util

    return importlib.util.find_spec(CHANNEL_SERVER_MODULE) is not None


def _mcp_mounted(api_url: str) -> bool:
    """The API serves the tool server when /internal/mcp is a route (401 without a run token), not a 404."""
    try:
        return httpx.post(f"{api_url}/internal/mcp", json={}, timeout=5).status_code not in (404, 405)
    except httpx.TransportError:
        return False


def start_topology(
    group: ProcessGroup,
    *,
    channel_api_key: str,
    preferred: bool = True,
    service_env: Mapping[str, Mapping[str, str]] | None = None,
    timeout_s: float = 90.0,
) -> Topology:
    """API first (the others need its outbox relay and maybe its tool server), then the channel server,
    the MCP server if the API does not mount it, and the four workers; returns when all are healthy
    and the workers ready."""
    extra = service_env or {}
    port = {name: pick_port(default if preferred else None) for name, default in DEMO_PORTS.items()}
    api_url = f"http://127.0.0.1:{port['api']}"
    # Where the channel server reaches the API: the webhook URL ``:connect`` writes into its session.
    group.start_service("api", port["api"], {"API_PUBLIC_URL": api_url, **(extra.get("api") or {})})
    group.wait_healthy("api", timeout_s)
    mounted = _mcp_mounted(api_url)
    mcp_url = f"{api_url}/internal/mcp"
    if not mounted:
        mcp_url = f"http://127.0.0.1:{port['mcp']}/internal/mcp"
        group.start(
            "mcp",
            [sys.executable, "-m", "services.api.mcp"],
            mcp_url,
            {"MCP_PORT": str(port["mcp"])},
        )
    channel_url: str | None = None
    if channel_server_available():
        channel_url = f"http://127.0.0.1:{port['channel']}"
        group.start(
            "channel",
            [sys.executable, "-m", CHANNEL_SERVER_MODULE, "--port", str(port["channel"])],
            f"{channel_url}/api/received",
            # In the environment, not on the command line, where ``ps`` shows it to every local user.
            {CHANNEL_SERVER_KEY_ENV: channel_api_key},
        )
    workers = ("dispatcher", "runner", "notifier", "brief")
    for service in workers:
        env = dict(extra.get(service, {}))
        if service == "runner":
            env.setdefault("RUNNER_MCP_URL", mcp_url)
        if service == "notifier":
            # The script turns the morning push on and waits for it: look every 2 s, not 60.
            env.setdefault("NOTIFIER_DIGEST_INTERVAL_S", "2")
        group.start_service(service, port[service], env)
    if not mounted:
        group.wait_healthy("mcp", timeout_s, ok_statuses=(200, 401, 405, 406))
    if channel_url is not None:
        group.wait_healthy("channel", timeout_s)
    for service in workers:
        # Ready, not just alive: a consumer that has not joined its group yet would hold the first
        # message for the join (seconds; on a loaded machine more than a scenario waits).
        group.wait_healthy(service, timeout_s, ready=True)
    metrics = {"api": f"{api_url}/metrics"} | {s: f"http://127.0.0.1:{port[s]}/metrics" for s in workers}
    return Topology(api_url, channel_url, mcp_url, mounted, metrics)
