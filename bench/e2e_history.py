"""History for the end-to-end benchmark's database: what a database in use already holds.

Why: the benchmark's scratch database starts empty. PostgreSQL plans a statement the
services prepare while its tables hold a few pages, finds a sequential scan cheapest, and
keeps that plan until autovacuum analyzes the table (``autovacuum_naptime``, 60 s). For the
first minute of a fresh database the notifier's outcome statement, the runner's claim and
its terminal update then scan tables that grow by hundreds of rows a second: measured
2026-12-04 with pg_stat_statements at 30 msg/s over 20 s, 1,931, 1,042 and 365 buffers per
call, each reading a little more than the call before. A deployment's tables are large and
analyzed, and these statements are index lookups there. So before the warm-up the org gets
a past — contacts, conversations, their messages, the runs that answered them, the
runs' deliveries and the outbox rows the relay published for them (it keeps them a week),
all two days old and finished — and the database is vacuumed and analyzed, as autovacuum
would have done long before. Analyzed without that outbox, the relay's statements went the other way:
statistics of an outbox of a few rows made them sequential scans of a table that grew. The
history is in chats the load never writes to, before today (the brief's day and the pulse
count nothing of it).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, Engine
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from switchboard.db.session import tenant_transaction

CONVERSATIONS: Final = 2_000
EXCHANGES_PER_CONVERSATION: Final = 5  # an inbound message and its reply each

# One statement: the org's first channel session and published agent own the past, as they
# own the load. Each CTE draws its ids once (CTEs are materialized), so the rows of every table
# reference those of the one before.
_SEED = text(
    """
WITH owner AS (
    SELECT s.id AS session_id, a.id AS agent_id, a.published_version_id AS version_id
    FROM channel_sessions AS s
    JOIN ai_agents AS a ON a.org_id = s.org_id AND a.published_version_id IS NOT NULL
    WHERE s.org_id = :org_id
    ORDER BY s.created_at, a.priority DESC, a.created_at
    LIMIT 1
), chats AS (
    SELECT n, gen_random_uuid() AS contact_id, gen_random_uuid() AS conversation_id
    FROM generate_series(1, :conversations) AS n
), contacts_added AS (
    INSERT INTO contacts (id, org_id, external_id, display_name, created_at, updated_at)
    SELECT contact_id, :org_id, 'history-' || n || '@c.us', 'Customer ' || n, :at, :at FROM chats
), conversations_added AS (
    INSERT INTO conversations (id, org_id, channel_session_id, chat_id, contact_id, status,
                               last_message_at, created_at, updated_at)
    SELECT conversation_id, :org_id, owner.session_id, 'history-' || n || '@c.us', contact_id, 'open',
           :at, :at, :at
    FROM chats CROSS JOIN owner
), exchanges AS (
    SELECT chats.*, e, gen_random_uuid() AS inbound_id, gen_random_uuid() AS reply_id,
           gen_random_uuid() AS run_id, :at + make_interval(mins => e) AS at
    FROM chats CROSS JOIN generate_series(1, :exchanges) AS e
), messages_added AS (
    INSERT INTO messages (id, org_id, conversation_id, channel_session_id, direction, sender, body,
                          delivery_status, occurred_at, created_at, updated_at, run_id)
    SELECT x.inbound_id, :org_id, x.conversation_id, owner.session_id, 'inbound', 'contact',
           'Olá, qual o horário de hoje?', 'received', x.at, x.at, x.at, NULL
    FROM exchanges AS x CROSS JOIN owner
    UNION ALL
    SELECT x.reply_id, :org_id, x.conversation_id, owner.session_id, 'outbound', 'agent',
           'Hoje abrimos das 9h às 18h.', 'delivered', x.at, x.at, x.at, x.run_id
    FROM exchanges AS x CROSS JOIN owner
), runs_added AS (
    INSERT INTO ai_agent_runs (id, org_id, agent_id, agent_version_id, conversation_id, contact_id,
                               channel_session_id, inbound_message_id, inbound_message_ids,
                               outbound_message_id, status, vitality, provider, model, steps_count,
                               tokens_in, tokens_out, latency_ms, final_text, created_at, updated_at,
                               started_at, completed_at)
    SELECT x.run_id, :org_id, owner.agent_id, owner.version_id, x.conversation_id, x.contact_id,
           owner.session_id, x.inbound_id, ARRAY[x.inbound_id], x.reply_id, 'completed', 'completed',
           'demo', 'demo', 1, 120, 12, 4, 'Hoje abrimos das 9h às 18h.', x.at, x.at, x.at, x.at
    FROM exchanges AS x CROSS JOIN owner
), outbox_added AS (
    -- The relay keeps published rows for a week (OutboxRelaySettings.retention): three per answer,
    -- on topic names nothing reads (their payloads are filler, not records).
    INSERT INTO outbox (topic, key, payload, created_at, published_at)
    SELECT 'history.' || topic, convert_to(x.conversation_id::text, 'UTF8'), convert_to(repeat('x', 300), 'UTF8'),
           x.at, x.at
    FROM exchanges AS x CROSS JOIN unnest(ARRAY['dispatch_requested', 'run_started', 'run_completed']) AS topic
)
INSERT INTO run_deliveries (org_id, run_id, message_id, kind, channel, status, attempts,
                            completed_at, created_at, updated_at)
SELECT :org_id, x.run_id, x.reply_id, 'reply', 'waha', 'sent', 1, x.at, x.at, x.at
FROM exchanges AS x
"""
)


def seed_history(
    owner_url: URL | str,
    org_id: str,
    *,
    conversations: int = CONVERSATIONS,
    exchanges: int = EXCHANGES_PER_CONVERSATION,
) -> None:
    """Give ``org_id`` a finished past two days old, then vacuum and analyze the database."""
    engine = create_engine(owner_url, poolclass=NullPool)
    try:
        with Session(engine) as session, tenant_transaction(session, org_id):
            session.execute(
                _SEED,
                {
                    "org_id": org_id,
                    "conversations": conversations,
                    "exchanges": exchanges,
                    "at": datetime.now(UTC) - timedelta(days=2),
                },
            )
        _settle(engine)
    finally:
        engine.dispose()


# The baseline's past: one processed row per past inbound message, two days old (its poll reads a
# partial index of unprocessed rows, so this changes little there; it keeps the comparison even).
_SEED_BASELINE = text(
    """
INSERT INTO event_log (event_type, payload, created_at, processed_at, outcome)
SELECT 'message_received', convert_to('{"history": ' || n || '}', 'UTF8'), :at, :at, 'replied'
FROM generate_series(1, :messages) AS n
"""
)


def seed_baseline_history(url: URL | str, *, messages: int = CONVERSATIONS * EXCHANGES_PER_CONVERSATION) -> None:
    """Give the baseline's ``event_log`` a processed row per inbound message of Switchboard's past."""
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as connection:
            connection.execute(_SEED_BASELINE, {"messages": messages, "at": datetime.now(UTC) - timedelta(days=2)})
        _settle(engine)
    finally:
        engine.dispose()


def _settle(engine: Engine) -> None:
    """VACUUM as well as ANALYZE: tens of thousands of fresh inserts are over autovacuum's insert
    threshold, and its pass (and the hint bits the first reads would set) would otherwise land in
    the measured window's PostgreSQL CPU."""
    with engine.connect() as connection:
        connection.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM (ANALYZE)"))
