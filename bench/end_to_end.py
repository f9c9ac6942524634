"""PLACEHOLDER, not implemented yet: the end-to-end benchmark of ``make bench`` (issue 8 §2).

To be written by whoever builds it: ingest → reply received by the local WAHA-compatible
channel server, all five services as processes, a zero-latency model, a fixed 200 msg/s
over many conversations; p50 / p99 / max latency and throughput, against the seed's
design (the PostgreSQL polling dispatcher) in the same run. Goal: p99 ≤ 100 ms at
200 msg/s. The metric names reserved for it are in docs/benchmarks.md.

Until then this hook **emits no measurement**, on purpose: a made-up or copied number in
``var/bench/latest.json`` would read as measured. ``python -m bench`` runs it like the
others and lists it as "not implemented".

Contract for the implementation: keep ``main(argv)`` with ``--smoke`` / ``--report``
(``bench.report.add_common_arguments``), build the ``list[Measurement]`` in ``collect``
with the reserved names, and set ``IMPLEMENTED = True``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Final

from bench.report import Measurement, add_common_arguments, publish

IMPLEMENTED: Final = False


def collect(args: argparse.Namespace) -> list[Measurement]:
    """Nothing yet: see the module docstring."""
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_common_arguments(parser, argv, smoke={})
    args = parser.parse_args(argv)
    print("end-to-end benchmark: not implemented yet (bench/end_to_end.py); no measurement emitted")
    publish(collect(args), args.report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
