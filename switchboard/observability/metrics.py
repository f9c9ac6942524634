"""Prometheus metrics shared by every service (SPEC §11).

Metric objects live here, once, so two services never register the same name
twice with different labels. Service-specific metrics are declared in the
service but follow the same ``switchboard_`` prefix.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

SERVICE_UP = Gauge("switchboard_service_up", "1 while the service runs its main loop", ["service"])

RECORDS_CONSUMED = Counter(
    "switchboard_records_consumed_total", "Kafka records handled, by outcome", ["service", "topic", "outcome"]
)
RECORDS_DEAD_LETTERED = Counter(
    "switchboard_records_dead_lettered_total",
    "Records sent to the dead-letter topic",
    ["service", "topic", "error_code"],
)
RECORDS_PRODUCED = Counter("switchboard_records_produced_total", "Kafka records produced", ["service", "topic"])
HANDLER_SECONDS = Histogram(
    "switchboard_handler_seconds",
    "Time spent handling one record",
    ["service", "topic"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
CONSUMER_LAG = Gauge("switchboard_consumer_lag", "Records behind the partition end", ["service", "topic", "partition"])
