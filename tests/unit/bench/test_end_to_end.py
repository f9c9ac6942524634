"""The end-to-end benchmark's pure parts: pairing replies with messages, percentiles, the ``e2e.*`` lines,
the deliveries it sends and the baseline's model. No timing is asserted: numbers depend on the machine."""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json

import pytest

from bench import e2e_stats, end_to_end
from bench.e2e_baseline import model_reply
from bench.e2e_load import chat_ids, delivery, received_rows
from bench.e2e_stats import Received, Sent, Summary, match, measurements, percentile, summarize
from bench.report import add_common_arguments
from scripts.demo.bootstrap import sign
from services.api.webhooks.schemas import WahaEvent, WahaMessage
from services.runner.providers.demo import LABEL
from switchboard.settings import REPO_ROOT

E2E_METRICS = (
    "e2e.latency.p50",
    "e2e.latency.p99",
    "e2e.latency.max",
    "e2e.throughput",
    "e2e.lost",
    "e2e.doubled",
    "e2e.ingest_errors",
)


def _summary(name: str, *, p50: float, p99: float, sent: int = 1000, lost: int = 0, throughput: float = 200) -> Summary:
    return Summary(name, 200.0, sent, sent - lost, lost, 0, 0, p50, p99, p99 * 2, throughput)


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(100, 0, -1)]  # 1..100, unsorted
    assert percentile(values, 0.50) == 50
    assert percentile(values, 0.99) == 99
    assert percentile(values, 1.0) == 100
    assert percentile(values, 0.0) == 1
    assert percentile([7.0], 0.99) == 7
    assert percentile([], 0.5) is None
    with pytest.raises(ValueError):
        percentile(values, 99)


def test_replies_pair_with_messages_by_chat_and_order() -> None:
    sent = [Sent("a", 10.0), Sent("b", 10.5), Sent("a", 12.0), Sent("c", 13.0)]
    received = [
        Received("a", 12.3),  # a's second reply: 300 ms after a's second message
        Received("b", 10.55),
        Received("a", 10.1),  # arrives in the list after a later one: order is by receipt time
        Received("zzz", 11.0),  # someone else's chat: ignored
        Received("b", 10.6),  # a second reply to b's only message: doubled
    ]
    matched = match(sent, received)
    assert sorted(round(v) for v in matched.latencies_ms) == [50, 100, 300]
    assert (matched.lost, matched.doubled) == (1, 1)  # c never answered; b answered twice
    assert (matched.first_received, matched.last_received) == (10.1, 12.3)


def test_summary_counts_and_throughput_over_the_replies_span() -> None:
    sent = [Sent(f"chat{i}", 100.0 + i / 10) for i in range(11)]
    received = [Received(f"chat{i}", 100.05 + i / 10) for i in range(11)]
    summary = summarize("switchboard", 10.0, sent, match(sent, received), ingest_errors=2)
    assert (summary.sent, summary.answered, summary.lost, summary.doubled, summary.ingest_errors) == (11, 11, 0, 0, 2)
    assert summary.p50_ms == pytest.approx(50.0) and summary.max_ms == pytest.approx(50.0)
    assert summary.throughput == pytest.approx(10.0)  # 10 intervals over 1 s
    nothing = summarize("switchboard", 10.0, sent, match(sent, []), ingest_errors=0)
    assert (nothing.answered, nothing.lost, nothing.p99_ms, nothing.throughput) == (0, 11, None, None)


def test_measurements_carry_the_goal_and_the_poller_baseline() -> None:
    real = _summary("switchboard", p50=40, p99=90, throughput=199)
    base = _summary("baseline", p50=60, p99=120, throughput=200)
    lines = {m.metric: m for m in measurements(real, base, "poller")}
    assert tuple(lines) == E2E_METRICS
    p99 = lines["e2e.latency.p99"]
    assert (p99.value, p99.baseline, p99.baseline_value, p99.ratio, p99.goal, p99.met) == (
        90,
        "poller",
        120,
        0.75,
        "value <= 100",
        True,
    )
    assert lines["e2e.throughput"].goal == "value >= 190" and lines["e2e.throughput"].met is True
    assert all(lines[name].goal is None for name in E2E_METRICS if name not in ("e2e.latency.p99", "e2e.throughput"))
    slow = {m.metric: m for m in measurements(_summary("s", p50=80, p99=101, throughput=150), base, "poller")}
    assert slow["e2e.latency.p99"].met is False and slow["e2e.throughput"].met is False


def test_many_lost_messages_fail_the_p99_goal_whatever_the_answered_ones_say() -> None:
    base = _summary("baseline", p50=60, p99=120)
    few = {m.metric: m for m in measurements(_summary("s", p50=40, p99=90, lost=10), base, "poller")}
    many = {m.metric: m for m in measurements(_summary("s", p50=40, p99=90, lost=11), base, "poller")}
    assert few["e2e.latency.p99"].met is True  # 1 % of 1,000: within the percentile
    assert many["e2e.latency.p99"].met is False
    assert many["e2e.lost"].value == 11 and many["e2e.lost"].baseline_value == 0


def test_without_a_baseline_there_is_no_ratio_and_no_guess() -> None:
    lines = {m.metric: m for m in measurements(_summary("s", p50=40, p99=90), None, "poller")}
    assert all(m.ratio is None and m.baseline_value is None for m in lines.values())
    assert lines["e2e.latency.p99"].met is True  # the goal is on the value itself


def test_the_deliveries_are_what_the_real_webhook_accepts_and_signed_as_waha_signs() -> None:
    body = delivery("sess-1", "5511999990000@c.us", "Oi")
    event = WahaEvent.model_validate_json(body)
    message = WahaMessage.model_validate(event.payload)
    assert (event.event, event.session, message.from_, message.from_me, message.body) == (
        "message",
        "sess-1",
        "5511999990000@c.us",
        False,
        "Oi",
    )
    assert json.loads(delivery("s", "c", "t"))["payload"]["id"] != json.loads(delivery("s", "c", "t"))["payload"]["id"]
    headers = sign("secret", body)
    assert headers["X-Webhook-Hmac"] == hmac.new(b"secret", body, hashlib.sha512).hexdigest()
    chats = chat_ids(50, phase=2)
    assert len(set(chats)) == 50 and all(c.endswith("@c.us") for c in chats)


def test_only_delivered_replies_to_our_chats_count() -> None:
    rows = [
        {"chat_id": "a", "received_at": "2026-11-30T07:00:00.250000+00:00", "status_returned": 201},
        {"chat_id": "a", "received_at": "2026-11-30T07:00:00.300000+00:00", "status_returned": 503},
        {"chat_id": "other", "received_at": "2026-11-30T07:00:00.400000+00:00", "status_returned": 201},
    ]
    [reply] = received_rows(rows, {"a"})
    assert reply.chat_id == "a" and reply.received_at % 60 == pytest.approx(0.25)


def test_the_baseline_runs_the_same_zero_latency_model_without_tools() -> None:
    reply = model_reply(json.loads(delivery("s", "c", "Oi, tudo bem?"))["payload"]["body"])
    assert reply.startswith(LABEL) and "Hello" in reply


def test_smoke_profile_and_docs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BENCH_PROFILE", raising=False)
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=200.0)
    add_common_arguments(parser, ["--smoke"], end_to_end.SMOKE)
    assert parser.parse_args(["--smoke"]).rate == end_to_end.SMOKE["rate"] < 200
    assert end_to_end.IMPLEMENTED is True
    assert e2e_stats.GOAL_P99_MS == 100
    docs = (REPO_ROOT / "docs" / "benchmarks.md").read_text()
    assert [name for name in E2E_METRICS if f"`{name}`" not in docs] == []


def test_the_services_run_with_production_settings_but_the_reply_interval() -> None:
    """The demo's topology makes the notifier look for due morning pushes every 2 s (its script waits
    for one); each look is a ~30 ms query, so the benchmark would charge the pipeline for a demo setting."""
    from services.notifier.settings import NotifierSettings

    production = NotifierSettings.model_fields["digest_interval_s"].default
    assert float(end_to_end.SERVICE_ENV["NOTIFIER_DIGEST_INTERVAL_S"]) == production >= 60
    assert set(end_to_end.SERVICE_ENV) == {"DISPATCHER_REPLY_INTERVAL_S", "NOTIFIER_DIGEST_INTERVAL_S"}
