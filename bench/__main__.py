"""``make bench``: every benchmark in one run, each measurement next to its baseline.

Runs each bench module as its own process (so one's heap, threads and event loop never
weigh on the next one's timings), in a fixed order, each with ``--report`` into
``var/bench/parts/``; then writes all measurements to ``var/bench/latest.json`` and prints
them as one table. ``--smoke`` (or ``BENCH_PROFILE=smoke``) passes the tiny profile to
every bench and writes ``var/bench/latest-smoke.json`` instead, so a wiring check never
replaces real figures.

Exit status: 0 when every bench ran (goals met or not: a benchmark measures, it does not
judge), 1 when one failed to produce its measurements.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bench import end_to_end
from bench.report import LATEST, Measurement, read_json, render_table, smoke_requested, write_json
from switchboard.settings import REPO_ROOT

PARTS: Final = LATEST.parent / "parts"
SMOKE_OUTPUT: Final = LATEST.with_name("latest-smoke.json")


@dataclass(frozen=True)
class Bench:
    name: str
    module: str
    what: str
    implemented: bool = True  # False: a placeholder hook that runs but emits nothing


BENCHES: Final = (
    Bench("api", "bench.api_ingest", "webhook ingest vs a bare FastAPI endpoint (wrk)"),
    Bench("dispatch", "bench.dispatch", "dispatcher vs a plain aiokafka pipe and a 100 ms PostgreSQL poller"),
    Bench("runner", "bench.runner", "runner overhead vs LangGraph; 1,000 concurrent runs' RSS"),
    Bench(
        "end_to_end",
        "bench.end_to_end",
        "ingest -> reply at the channel server at 200 msg/s vs a 100 ms polling pipeline",
        implemented=end_to_end.IMPLEMENTED,
    ),
)


@dataclass
class Outcome:
    bench: Bench
    status: str  # "ok", "failed (...)", "not implemented"
    measurements: list[Measurement]
    seconds: float


def run_one(bench: Bench, *, smoke: bool) -> Outcome:
    report = PARTS / f"{bench.name}.json"
    report.unlink(missing_ok=True)
    command = [sys.executable, "-m", bench.module, "--report", str(report), *(["--smoke"] if smoke else [])]
    print(f"\n== {bench.name}: {bench.what}\n   $ {' '.join(command[1:])}", flush=True)
    started = time.monotonic()
    done = subprocess.run(command, cwd=REPO_ROOT)
    seconds = time.monotonic() - started
    if done.returncode != 0 or not report.exists():
        return Outcome(bench, f"failed (exit {done.returncode})", [], seconds)
    found = read_json(report)
    if not bench.implemented:
        return Outcome(bench, "not implemented (no measurement emitted)", found, seconds)
    return Outcome(bench, "ok", found, seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny profile for every bench (also BENCH_PROFILE=smoke)")
    parser.add_argument(
        "--only", default="", help=f"comma-separated benches to run (default: all of {[b.name for b in BENCHES]})"
    )
    parser.add_argument("--output", type=Path, default=None, help="where to write the JSON (default: var/bench/...)")
    args = parser.parse_args(argv)
    smoke = args.smoke or smoke_requested(argv)
    chosen = {name.strip() for name in args.only.split(",") if name.strip()}
    unknown = chosen - {b.name for b in BENCHES}
    if unknown:
        parser.error(f"unknown bench(es) {sorted(unknown)}")
    PARTS.mkdir(parents=True, exist_ok=True)

    outcomes = [run_one(b, smoke=smoke) for b in BENCHES if not chosen or b.name in chosen]
    measurements = [m for outcome in outcomes for m in outcome.measurements]
    output = write_json(measurements, args.output or (SMOKE_OUTPUT if smoke else LATEST))

    print(f"\n== all measurements ({'smoke profile: wiring check, not results' if smoke else 'full profile'})\n")
    print(render_table(measurements))
    print()
    for outcome in outcomes:
        print(
            f"  {outcome.bench.name:<11} {outcome.status:<44} {len(outcome.measurements):>2} measurement(s)"
            f"  {outcome.seconds:6.0f} s"
        )
    print(f"\nwritten to {output.relative_to(REPO_ROOT) if output.is_relative_to(REPO_ROOT) else output}")
    return 1 if any(o.status.startswith("failed") for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
