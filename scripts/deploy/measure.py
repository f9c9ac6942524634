"""Measure what sizes the pods: resident memory and SIGTERM-to-exit time of each service.

    python -m scripts.deploy.measure [--seconds 20] [--service api ...]

Needs the local stack (``make up``): each service is started as ``switchboard <name>``
with ``var/stack.env``, its health port on a free local port, and sampled while idle
(VmRSS every half second from ``/proc/<pid>/status``, plus VmHWM, the peak); then it
gets SIGTERM and the time until it exits is taken. The numbers go into docs/deploy.md
and, with headroom, into the requests and limits that ``scripts.deploy.generate`` writes.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("api", "dispatcher", "runner", "notifier", "brief", "outbox-relay")


@dataclass(frozen=True)
class Measurement:
    service: str
    ready_s: float
    rss_mib: float
    peak_mib: float
    shutdown_s: float
    exit_code: int


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise LookupError(field)


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def measure(service: str, seconds: float) -> Measurement:
    port = _free_port()
    port_var = "API_PORT" if service == "api" else f"{service.upper().replace('-', '_')}_HEALTH_PORT"
    env = {**os.environ, port_var: str(port), "SWITCHBOARD_LOG_LEVEL": "WARNING"}
    started = time.monotonic()
    proc = subprocess.Popen(
        [str(REPO_ROOT / ".venv" / "bin" / "switchboard"), service],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while not _ready(port):
            if proc.poll() is not None or time.monotonic() - started > 60:
                raise RuntimeError(f"{service} did not become ready")
            time.sleep(0.1)
        ready_s = time.monotonic() - started
        samples = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            samples.append(_status_kib(proc.pid, "VmRSS"))
            _ready(port)  # exercise the probe path while sampling
            time.sleep(0.5)
        peak = _status_kib(proc.pid, "VmHWM")
        stopping = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
        return Measurement(
            service=service,
            ready_s=ready_s,
            rss_mib=max(samples) / 1024,
            peak_mib=peak / 1024,
            shutdown_s=time.monotonic() - stopping,
            exit_code=code,
        )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to sample each service")
    parser.add_argument("--service", action="append", choices=SERVICES, help="only these services")
    args = parser.parse_args(argv)
    print("| service | ready after (s) | VmRSS idle (MiB) | VmHWM peak (MiB) | SIGTERM to exit (s) | exit |")
    print("| --- | --- | --- | --- | --- | --- |")
    for service in args.service or SERVICES:
        m = measure(service, args.seconds)
        cells = [m.service, f"{m.ready_s:.1f}", f"{m.rss_mib:.0f}", f"{m.peak_mib:.0f}", f"{m.shutdown_s:.2f}"]
        print(f"| {' | '.join(cells)} | {m.exit_code} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
