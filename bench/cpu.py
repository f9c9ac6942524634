"""Where the CPU went during a benchmark: CPU seconds per group of processes, read from ``/proc``.

Every process of the machine is put in a group by its command line — each Switchboard
service (``services.cli <name>``), PostgreSQL's backends, the Kafka broker, the channel
server, the load generator (this process), the end-to-end baseline — and two snapshots'
difference says how much CPU (user + system) each group spent between them. Divided by
the messages answered, it is the cost model of a pipeline: what one message costs in
each process. Linux only (``/proc``); elsewhere the snapshots are empty and nothing is
reported.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Final

PROC: Final = Path("/proc")
_SERVICE = re.compile(r"services\.cli (\w+)")
_TICKS_PER_S: Final = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def group_of(command: str) -> str | None:
    """The group a command line belongs to, or None for a process no benchmark cares about."""
    service = _SERVICE.search(command)
    if service:
        return service.group(1)
    if command.startswith("postgres") or "/bin/postgres " in command:
        return "postgres"
    if "kafka.Kafka" in command:
        return "kafka"
    if "scripts.channel_server" in command:
        return "channel"
    if "bench.e2e_baseline" in command:
        return "baseline"
    if "bench.end_to_end" in command or "-m bench" in command:
        return "load"
    return None


@dataclass(frozen=True)
class Snapshot:
    """CPU seconds so far, per process id, with the process's group."""

    seconds: dict[int, tuple[str, float]]


def snapshot() -> Snapshot:
    seen: dict[int, tuple[str, float]] = {}
    if not PROC.is_dir():
        return Snapshot(seen)
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # it ended meanwhile
        group = group_of(command)
        if group is None:
            continue
        # Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
        fields = stat[stat.rindex(")") + 2 :].split()
        seen[int(entry.name)] = (group, (int(fields[11]) + int(fields[12])) / _TICKS_PER_S)
    return Snapshot(seen)


def spent(before: Snapshot, after: Snapshot) -> dict[str, float]:
    """CPU seconds per group between two snapshots (a process started meanwhile counts from zero)."""
    totals: dict[str, float] = defaultdict(float)
    for pid, (group, seconds) in after.seconds.items():
        start = before.seconds.get(pid)
        totals[group] += seconds - (start[1] if start is not None and start[0] == group else 0.0)
    return dict(totals)


def per_message_line(spent_s: dict[str, float], messages: int) -> str:
    """``runner 9.7 · postgres 8.1 · … · total 41.0 ms`` — CPU milliseconds per message, largest first."""
    if messages <= 0 or not spent_s:
        return "(no CPU figures)"
    parts = sorted(spent_s.items(), key=lambda item: -item[1])
    text = " · ".join(f"{group} {seconds * 1000 / messages:.1f}" for group, seconds in parts)
    return f"{text} · total {sum(spent_s.values()) * 1000 / messages:.1f} ms"
