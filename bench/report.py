"""One shape for every benchmark's results: a measurement next to its baseline and its goal.

Each bench module turns its raw figures into :class:`Measurement` objects (its
``measurements`` function) and writes them with ``--report PATH``; ``python -m bench``
(``make bench``) gathers them into
``var/bench/latest.json`` and prints the same as a table. Metric names are stable, so runs
can be compared over time, but a ratio is only meaningful within one run: baseline and
measurement are taken side by side on the same machine, minutes apart.
"""

from __future__ import annotations

import argparse
import json
import math
import operator
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from switchboard.settings import REPO_ROOT

LATEST: Final = REPO_ROOT / "var" / "bench" / "latest.json"
FIELDS: Final = ("metric", "value", "unit", "baseline", "baseline_value", "ratio", "goal", "met")
PROFILE_ENV: Final = "BENCH_PROFILE"
SMOKE: Final = "smoke"

_OPERATORS: Final[dict[str, Callable[[float, float], bool]]] = {">=": operator.ge, "<=": operator.le}


@dataclass(frozen=True, slots=True)
class Goal:
    """A target on the ratio (value / baseline_value) or, without a baseline, on the value."""

    subject: str  # "ratio" or "value"
    op: str  # ">=" or "<="
    threshold: float

    def __post_init__(self) -> None:
        if self.subject not in ("ratio", "value") or self.op not in _OPERATORS:
            raise ValueError(f"unsupported goal {self.subject} {self.op} {self.threshold}")

    def __str__(self) -> str:
        return f"{self.subject} {self.op} {self.threshold:g}"

    def met_by(self, value: float | None, ratio: float | None) -> bool | None:
        figure = ratio if self.subject == "ratio" else value
        if figure is None or math.isnan(figure):
            return None
        return _OPERATORS[self.op](figure, self.threshold)


@dataclass(frozen=True, slots=True)
class Measurement:
    """One line of ``latest.json``: see docs/benchmarks.md for every field."""

    metric: str
    value: float | None
    unit: str
    baseline: str | None = None
    baseline_value: float | None = None
    ratio: float | None = None
    goal: str | None = None
    met: bool | None = None

    @classmethod
    def of(
        cls,
        metric: str,
        value: float | None,
        unit: str,
        *,
        baseline: str | None = None,
        baseline_value: float | None = None,
        goal: Goal | None = None,
    ) -> Measurement:
        """A measurement with its ratio to the baseline (when both exist) and the goal's verdict."""
        ratio = None
        if value is not None and baseline_value:
            ratio = round(value / baseline_value, 4)
        return cls(
            metric=metric,
            value=None if value is None else round(value, 4),
            unit=unit,
            baseline=baseline,
            baseline_value=None if baseline_value is None else round(baseline_value, 4),
            ratio=ratio,
            goal=None if goal is None else str(goal),
            met=None if goal is None else goal.met_by(value, ratio),
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Measurement:
        missing = [name for name in FIELDS if name not in data]
        if missing:
            raise ValueError(f"measurement lacks {missing}: {data}")
        return cls(**{name: data[name] for name in FIELDS})


# --------------------------------------------------------------------------- files


def write_json(measurements: Iterable[Measurement], path: Path = LATEST) -> Path:
    """Write the list (one object per measurement, FIELDS as keys), atomically.

    Metric names are the keys people compare runs by, so two measurements with one name
    are a bug in a bench, refused here.
    """
    items = list(measurements)
    names = [m.metric for m in items]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"metric names must be unique in a run: {repeated}")
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(json.dumps([m.to_json() for m in items], indent=2) + "\n")
    temporary.replace(path)
    return path


def read_json(path: Path) -> list[Measurement]:
    data = json.loads(path.read_text())
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of measurements")
    return [Measurement.from_json(item) for item in data]


# --------------------------------------------------------------------------- table


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.1f}"


def _met(met: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "-"}[met]


def render_table(measurements: Sequence[Measurement]) -> str:
    """A Markdown table (readable in a terminal, pasted as is into docs/benchmarks.md)."""
    header = ("metric", "value", "unit", "baseline", "baseline value", "ratio", "goal", "met")
    rows = [
        (
            m.metric,
            _number(m.value),
            m.unit,
            m.baseline or "-",
            _number(m.baseline_value),
            "-" if m.ratio is None else f"{m.ratio:.3f}",
            m.goal or "-",
            _met(m.met),
        )
        for m in measurements
    ]
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=False)]
    right = {1, 4, 5}

    def line(cells: Sequence[str]) -> str:
        padded = (c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        return "| " + " | ".join(padded) + " |"

    rule = "| " + " | ".join(("-" * (w - 1) + ":") if i in right else "-" * w for i, w in enumerate(widths)) + " |"
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


# --------------------------------------------------------------------------- CLI helpers


def smoke_requested(argv: Sequence[str] | None = None) -> bool:
    """``--smoke`` on the command line (``sys.argv`` when ``argv`` is None) or ``BENCH_PROFILE=smoke``."""
    arguments = sys.argv[1:] if argv is None else argv
    return "--smoke" in arguments or os.environ.get(PROFILE_ENV, "").strip().lower() == SMOKE


def add_common_arguments(parser: argparse.ArgumentParser, argv: Sequence[str] | None, smoke: Mapping[str, Any]) -> None:
    """``--smoke`` (small, fast parameters: checks the wiring, measures nothing worth keeping)
    and ``--report PATH`` (write this bench's measurements as JSON, for ``python -m bench``).

    The smoke values replace the defaults only, so an explicit option still wins.
    """
    parser.add_argument(
        "--smoke", action="store_true", help=f"tiny run to check the wiring (also {PROFILE_ENV}={SMOKE})"
    )
    parser.add_argument("--report", type=Path, default=None, help="write the measurements as JSON to this file")
    if smoke_requested(argv):
        parser.set_defaults(**smoke)


def publish(measurements: Sequence[Measurement], report: Path | None) -> None:
    """Print a bench's measurements as a table and, with ``--report``, write them as JSON."""
    print(render_table(measurements))
    if report is not None:
        write_json(measurements, report)
