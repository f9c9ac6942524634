"""The notifier's Prometheus metrics (``switchboard_`` prefix, like the shared ones)."""

from __future__ import annotations

from prometheus_client import Counter

MESSAGES_DELIVERED = Counter(
    "switchboard_notifier_messages_total",
    "Outbound customer messages by outcome (sent, failed, unknown, withheld) and kind (reply, intent, human)",
    ["channel", "kind", "outcome"],
)
SEND_ATTEMPTS = Counter(
    "switchboard_notifier_send_attempts_total", "HTTP calls to channels and webhooks, retries included", ["channel"]
)
NOTIFICATIONS = Counter(
    "switchboard_notifier_notifications_total",
    "Notifications to the org's humans by type and outcome (sent, failed, skipped)",
    ["event_type", "outcome"],
)
