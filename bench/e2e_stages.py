"""Where the end-to-end time goes: per-stage delays read back from the run's own rows (printed, not measured).

The end-to-end figure is one number; these rows say which hop made it. They come from
timestamps the pipeline writes anyway (``now()`` of each transaction, so a stage's time
includes the queueing before it), for the messages of the measured phase:

- ``ingest → run row``: the inbound message's insert → the run row (outbox relay,
  Kafka, dispatcher, Kafka, the runner's claim);
- ``run row → started``, ``started → completed``: the runner;
- ``completed → delivered``: the run's end → the notifier's delivery row completed
  (outbox relay or Kafka, the notifier, the channel server's answer);
- ``outbox <topic>``: the relay's delay (created → published) per topic.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from switchboard.db.session import tenant_transaction

_PERCENTILES: Final = "percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY 1000 * extract(epoch FROM {}))"

_RUN_STAGES: Final = f"""
SELECT
    count(*) AS runs,
    {_PERCENTILES.format("r.created_at - m.created_at")} AS ingest_to_run,
    {_PERCENTILES.format("r.started_at - r.created_at")} AS run_to_started,
    {_PERCENTILES.format("r.completed_at - r.started_at")} AS started_to_completed,
    {_PERCENTILES.format("d.completed_at - r.completed_at")} AS completed_to_delivered
FROM dispatch_decisions AS x
JOIN messages AS m ON m.id = x.inbound_message_id
JOIN ai_agent_runs AS r ON r.id = x.run_id
LEFT JOIN run_deliveries AS d ON d.run_id = r.id AND d.completed_at IS NOT NULL
WHERE x.outcome = 'dispatched' AND m.created_at >= :since
"""

_OUTBOX: Final = f"""
SELECT topic, count(*) AS rows, {_PERCENTILES.format("published_at - created_at")} AS delay
FROM outbox WHERE created_at >= :since AND published_at IS NOT NULL GROUP BY topic ORDER BY topic
"""


def _pair(values: list[float] | None) -> str:
    if not values or values[0] is None:
        return "-"
    return f"p50 {values[0]:8.1f} ms   p99 {values[1]:8.1f} ms"


def stage_lines(owner_url: URL, org_id: str, since: datetime) -> list[str]:
    """The per-stage p50/p99 of the messages ingested since ``since``, as printable lines."""
    engine = create_engine(owner_url, poolclass=NullPool)
    try:
        with Session(engine) as session, tenant_transaction(session, org_id):
            runs = session.execute(text(_RUN_STAGES), {"since": since}).one()
            outbox = session.execute(text(_OUTBOX), {"since": since}).all()
    finally:
        engine.dispose()
    lines = [
        f"    runs dispatched: {runs.runs}",
        f"    ingest -> run row        {_pair(runs.ingest_to_run)}",
        f"    run row -> started       {_pair(runs.run_to_started)}",
        f"    started -> completed     {_pair(runs.started_to_completed)}",
        f"    completed -> delivered   {_pair(runs.completed_to_delivered)}",
    ]
    lines += [f"    outbox {row.topic:<40} {_pair(row.delay)} ({row.rows} rows)" for row in outbox]
    return lines
