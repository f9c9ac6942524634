"""The benchmark report: ``var/bench/latest.json``'s shape, goal verdicts, the table, and the wiring
of ``make bench`` — on synthetic figures. No timing is asserted, ever: numbers depend on the machine."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

import bench.__main__ as orchestrator
from bench import api_ingest, dispatch, runner
from bench.report import FIELDS, Goal, Measurement, add_common_arguments, read_json, render_table, write_json
from switchboard.settings import REPO_ROOT

# The stable names people compare runs by; docs/benchmarks.md explains each.
STABLE_METRICS = {
    "api.ingest.throughput",
    "api.ingest.latency.p99",
    "api.ingest.cpu_per_request",
    "api.bare_db.throughput",
    "dispatch.throughput",
    "dispatch.latency.p99",
    "dispatch.latency.p50",
    "dispatch.cpu_per_message",
    "runner.overhead_per_step.p50",
    "runner.overhead_per_step.p99",
    "runner.overhead_per_step.p50_vs_openai_agents",
    "runner.concurrency.completed",
    "runner.concurrency.peak_rss",
    "runner.concurrency.throughput",
}


def _wrk(rps: float, p99: float) -> api_ingest.WrkResult:
    return api_ingest.WrkResult(
        requests=1000, seconds=1.0, rps=rps, p50_ms=1.0, p99_ms=p99, non_2xx=0, socket_errors=0, server_cpu_ms=0.5
    )


def synthetic() -> list[Measurement]:
    """Every bench's measurements built from made-up raw figures, as ``make bench`` gathers them."""
    return [
        *api_ingest.measurements(_wrk(2000, 5), _wrk(500, 30), _wrk(700, 40)),
        *dispatch.measurements(
            [
                dispatch.Result(
                    "dispatcher", max_rate_per_s=1500, cpu_ms_per_message=0.5, p50_ms_at_rate=20, p99_ms_at_rate=50
                ),
                dispatch.Result(
                    "pipe-serde", max_rate_per_s=5000, cpu_ms_per_message=0.14, p50_ms_at_rate=9, p99_ms_at_rate=30
                ),
                dispatch.Result("pg-poll-100ms", max_rate_per_s=9000, p50_ms_at_rate=60, p99_ms_at_rate=120),
            ]
        ),
        *runner.measurements(
            {"switchboard": (150.0, 400.0), "langgraph": (2500.0, 4000.0), "openai-agents": (1800.0, 3000.0)},
            runner.ConcurrencyResult(requested=1000, completed=1000, elapsed_s=33.0, peak_rss_mb=241.0),
        ),
    ]


def test_latest_json_is_a_list_of_flat_objects_with_the_documented_keys(tmp_path: Path) -> None:
    path = write_json(synthetic(), tmp_path / "latest.json")
    data = json.loads(path.read_text())
    assert isinstance(data, list) and data
    for item in data:
        assert (
            list(item)
            == list(FIELDS)
            == ["metric", "value", "unit", "baseline", "baseline_value", "ratio", "goal", "met"]
        )
        assert isinstance(item["metric"], str) and isinstance(item["unit"], str)
        assert item["value"] is None or isinstance(item["value"], int | float)
        assert item["met"] in (True, False, None)
        assert (item["goal"] is None) == (item["met"] is None)
    assert {item["metric"] for item in data} == STABLE_METRICS
    assert read_json(path) == synthetic()


def test_every_goal_of_the_issues_is_present_with_its_baseline() -> None:
    by_metric = {m.metric: m for m in synthetic()}
    expected_goals = {
        "api.ingest.throughput": ("ratio >= 0.3", "bare FastAPI endpoint"),
        "dispatch.throughput": ("ratio >= 0.5", dispatch.PIPE_BASELINE),
        "dispatch.latency.p99": ("ratio <= 0.1", dispatch.POLLER_BASELINE),
        "runner.overhead_per_step.p50": ("ratio <= 0.5", runner.LANGGRAPH),
        "runner.concurrency.peak_rss": ("value <= 512", None),
        "runner.concurrency.completed": ("ratio >= 1", "runs requested at once"),
    }
    assert {m.metric for m in by_metric.values() if m.goal} == set(expected_goals)
    for metric, (goal, baseline) in expected_goals.items():
        assert (by_metric[metric].goal, by_metric[metric].baseline) == (goal, baseline)
    # Verdicts follow the synthetic figures: 700/2000 = 0.35, 1500/5000 = 0.3, 50/120 = 0.42, 150/2500 = 0.06.
    assert by_metric["api.ingest.throughput"].ratio == 0.35 and by_metric["api.ingest.throughput"].met is True
    assert by_metric["dispatch.throughput"].ratio == 0.3 and by_metric["dispatch.throughput"].met is False
    assert by_metric["dispatch.latency.p99"].met is False
    assert by_metric["runner.overhead_per_step.p50"].ratio == 0.06 and by_metric["runner.overhead_per_step.p50"].met
    assert by_metric["runner.concurrency.peak_rss"].ratio is None and by_metric["runner.concurrency.peak_rss"].met


def test_goal_verdicts_and_missing_figures() -> None:
    at_least_half = Goal("ratio", ">=", 0.5)
    assert Measurement.of("m", 50, "x", baseline="b", baseline_value=100, goal=at_least_half).met is True
    assert Measurement.of("m", 49, "x", baseline="b", baseline_value=100, goal=at_least_half).met is False
    assert Measurement.of("m", 10, "x", baseline="b", baseline_value=100, goal=Goal("ratio", "<=", 0.1)).met is True
    # A baseline that was not measured (or measured zero) gives no ratio and no verdict, never a guess.
    missing = Measurement.of("m", 50, "x", baseline="b", baseline_value=None, goal=at_least_half)
    assert (missing.ratio, missing.met) == (None, None)
    assert Measurement.of("m", 50, "x", baseline="b", baseline_value=0, goal=at_least_half).met is None
    assert dispatch.measurements([dispatch.Result("pipe-serde", max_rate_per_s=10)]) == []
    alone = {m.metric: m for m in dispatch.measurements([dispatch.Result("dispatcher", max_rate_per_s=10)])}
    assert alone["dispatch.throughput"].value == 10 and alone["dispatch.throughput"].met is None
    with pytest.raises(ValueError):
        Goal("ratio", "==", 1)


def test_duplicate_metric_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unique"):
        write_json([Measurement.of("a", 1, "x"), Measurement.of("a", 2, "x")], tmp_path / "latest.json")


def test_the_table_has_one_row_per_measurement() -> None:
    measurements = synthetic()
    lines = render_table(measurements).splitlines()
    assert lines[0].split("|")[1].strip() == "metric"
    assert set(lines[1]) <= {"|", "-", ":", " "}
    assert len(lines) == 2 + len(measurements)
    row = next(line for line in lines if "dispatch.throughput" in line)
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells == [
        "dispatch.throughput",
        "1,500",
        "msg/s",
        dispatch.PIPE_BASELINE,
        "5,000",
        "0.300",
        "ratio >= 0.5",
        "**no**",
    ]


def test_docs_explain_every_stable_metric() -> None:
    docs = (REPO_ROOT / "docs" / "benchmarks.md").read_text()
    assert [name for name in sorted(STABLE_METRICS) if f"`{name}`" not in docs] == []


def test_smoke_profile_replaces_defaults_but_not_explicit_options(monkeypatch: pytest.MonkeyPatch) -> None:
    def parse(argv: list[str]) -> argparse.Namespace:
        parser = argparse.ArgumentParser()
        parser.add_argument("--messages", type=int, default=20_000)
        parser.add_argument("--rate", type=float, default=1_000.0)
        add_common_arguments(parser, argv, dispatch.SMOKE)
        return parser.parse_args(argv)

    monkeypatch.delenv("BENCH_PROFILE", raising=False)
    assert (parse([]).messages, parse([]).report) == (20_000, None)
    assert parse(["--smoke"]).messages == dispatch.SMOKE["messages"]
    assert parse(["--smoke", "--messages", "7"]).messages == 7
    monkeypatch.setenv("BENCH_PROFILE", "smoke")
    assert parse(["--report", "x.json"]).rate == dispatch.SMOKE["rate"]
    assert parse(["--report", "x.json"]).report == Path("x.json")


def test_an_unknown_bench_name_is_refused() -> None:
    with pytest.raises(SystemExit):
        orchestrator.main(["--only", "nonexistent"])
