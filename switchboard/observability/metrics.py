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

# The transactional outbox relay (switchboard.kafka.outbox_relay). Gauges are set by the
# leading relay only (followers report 0): alert on max() across instances.
OUTBOX_RELAY_LEADER = Gauge("switchboard_outbox_relay_leader", "1 while this process holds the outbox relay lock")
OUTBOX_BACKLOG = Gauge(
    "switchboard_outbox_backlog", "Outbox rows waiting to be published (neither published nor dead-lettered)"
)
OUTBOX_OLDEST_AGE = Gauge(
    "switchboard_outbox_oldest_age_seconds", "Age of the oldest outbox row waiting to be published (0 when none)"
)
OUTBOX_DEAD_LETTERED_ROWS = Gauge(
    "switchboard_outbox_dead_lettered_rows", "Outbox rows set aside to the dead-letter topic and not yet pruned"
)
OUTBOX_PUBLISHED = Counter(
    "switchboard_outbox_published_total", "Outbox rows published and acknowledged by the broker", ["topic"]
)
OUTBOX_PUBLISH_FAILURES = Counter(
    "switchboard_outbox_publish_failures_total", "Failed attempts to publish an outbox row", ["topic", "error_code"]
)
OUTBOX_ORDER_BROKEN = Counter(
    "switchboard_outbox_order_broken_total",
    "Rows acknowledged after an earlier row of the same key had failed (a per-key reorder)",
    ["topic"],
)
OUTBOX_PRUNED = Counter("switchboard_outbox_pruned_total", "Outbox rows deleted after their retention", ["state"])
OUTBOX_PUBLISH_DELAY = Histogram(
    "switchboard_outbox_publish_delay_seconds",
    "From the writing transaction's start (created_at) to the broker's ack",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
