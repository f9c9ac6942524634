"""Where the CPU went (bench/cpu.py): grouping processes by command line, differences of snapshots,
and the per-message line and measurement of the end-to-end bench."""

from __future__ import annotations

import sys

import pytest

from bench import cpu
from bench.e2e_stats import Summary
from bench.end_to_end import BASELINE_LABEL, Measured, cpu_measurement


@pytest.mark.parametrize(
    ("command", "group"),
    [
        ("/work/.venv/bin/python -m services.cli runner", "runner"),
        ("/work/.venv/bin/python -m services.cli api", "api"),
        ("postgres: switchboard_app sb_bench 127.0.0.1(4242) idle", "postgres"),
        ("/usr/lib/postgresql/15/bin/postgres -D /work/var/postgres/data -p 55432", "postgres"),
        ("java -Xmx512m -cp libs/* kafka.Kafka server.properties", "kafka"),
        ("python -m scripts.channel_server --port 1", "channel"),
        ("python -m bench.e2e_baseline --port 2", "baseline"),
        ("python -m bench.end_to_end --rate 40", "load"),
        ("/usr/sbin/sshd -D", None),
    ],
)
def test_processes_are_grouped_by_command_line(command: str, group: str | None) -> None:
    assert cpu.group_of(command) == group


def test_spent_is_the_difference_and_a_new_process_counts_from_zero() -> None:
    before = cpu.Snapshot({1: ("runner", 10.0), 2: ("postgres", 3.0), 3: ("postgres", 1.0)})
    after = cpu.Snapshot({1: ("runner", 12.5), 2: ("postgres", 3.5), 4: ("postgres", 0.25)})  # 3 ended, 4 began
    assert cpu.spent(before, after) == {"runner": 2.5, "postgres": 0.75}
    assert cpu.per_message_line({"runner": 2.5, "postgres": 0.75}, 250) == "runner 10.0 · postgres 3.0 · total 13.0 ms"
    assert cpu.per_message_line({}, 250) == "(no CPU figures)"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_a_snapshot_reads_the_cpu_of_a_grouped_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test process, counted as the load generator: its CPU grows while it works."""
    monkeypatch.setattr(cpu, "group_of", lambda command: "load" if "pytest" in command else None)
    first = cpu.snapshot()
    sum(i * i for i in range(3_000_000))
    assert cpu.spent(first, cpu.snapshot()).get("load", 0.0) > 0.0


def _summary(answered: int) -> Summary:
    return Summary(
        name="s",
        offered_rate=10,
        sent=answered,
        answered=answered,
        lost=0,
        doubled=0,
        ingest_errors=0,
        p50_ms=1.0,
        p99_ms=2.0,
        max_ms=3.0,
        throughput=10.0,
    )


def test_the_cpu_measurement_leaves_the_load_generator_and_channel_out() -> None:
    real = Measured(_summary(100), {"runner": 1.0, "postgres": 1.0, "load": 5.0, "channel": 5.0})
    base = Measured(_summary(100), {"baseline": 0.2, "postgres": 0.3, "load": 5.0})
    line = cpu_measurement(real, base)
    assert (line.metric, line.value, line.unit, line.baseline, line.baseline_value, line.ratio) == (
        "e2e.cpu_per_message",
        20.0,
        "ms",
        BASELINE_LABEL,
        5.0,
        4.0,
    )
    assert line.goal is None and line.met is None
