"""The end-to-end benchmark's history (bench/e2e_history.py): a finished past the load never touches."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import func, select, text

from bench.e2e_history import seed_history
from switchboard.db.models import AiAgentRun, Message
from switchboard.db.models.channels import Conversation
from switchboard.db.models.notifications import RunDelivery
from switchboard.db.session import normalize_url
from tests.integration.brief.scene import make_scene
from tests.integration.db.conftest import MigratedDatabase, PgServer, scratch_database
from tests.support.agents import tenant_session
from tests.support.stack import StackEndpoints


@pytest.fixture
def scratch(stack: StackEndpoints) -> Iterator[MigratedDatabase]:
    """A database of its own, as the benchmark's: the history writes published outbox rows that
    are no records (tests that read the shared database's outbox would trip on them)."""
    server = PgServer(owner_url=normalize_url(stack.database_owner_url), app_url=normalize_url(stack.database_url))
    with scratch_database(server) as database:
        assert isinstance(database, MigratedDatabase)
        yield database


def test_the_history_is_a_finished_past_of_the_orgs_own_agent_and_session(scratch: MigratedDatabase) -> None:
    scene = make_scene(scratch.app_url.render_as_string(hide_password=False))
    seed_history(scratch.owner_url, str(scene.org_id), conversations=40, exchanges=3)

    with tenant_session(scene.org) as session:
        runs = session.scalars(select(AiAgentRun).where(AiAgentRun.org_id == scene.org_id)).all()
        messages = {m.id: m for m in session.scalars(select(Message).where(Message.org_id == scene.org_id))}
        deliveries = session.scalars(select(RunDelivery).where(RunDelivery.org_id == scene.org_id)).all()
        conversations = session.scalar(
            select(func.count()).select_from(Conversation).where(Conversation.org_id == scene.org_id)
        )

    assert (len(runs), len(messages), len(deliveries), conversations) == (120, 240, 120, 40 + 1)
    # The outbox the relay would have kept: published, on no topic anything reads.
    with scratch.owner_engine.connect() as connection:
        outbox = connection.execute(text("SELECT topic, published_at IS NOT NULL FROM outbox")).all()
    assert len(outbox) == 3 * 120 and all(published for _, published in outbox)
    topics = ("dispatch_requested", "run_started", "run_completed")
    assert {topic for topic, _ in outbox} == {f"history.{topic}" for topic in topics}
    today = datetime.now(UTC).date()
    # Finished: nothing for the dispatcher, the runner's sweep or the notifier's sweep to pick up.
    assert {(r.status, r.agent_id, r.agent_version_id, r.channel_session_id) for r in runs} == {
        ("completed", scene.agent_id, scene.version_id, scene.channel_session_id)
    }
    assert {d.status for d in deliveries} == {"sent"}
    # Before today: the brief's day and the pulse count none of it.
    assert max(r.created_at for r in runs).date() < today
    assert max(m.occurred_at for m in messages.values()).date() < today
    # Each run answers its inbound message with its own reply, and the reply's delivery is the run's.
    by_run = {d.run_id: d for d in deliveries}
    for run in runs:
        inbound, reply = messages[run.inbound_message_id], messages[run.outbound_message_id]
        assert (inbound.direction, reply.direction, reply.run_id) == ("inbound", "outbound", run.id)
        assert inbound.conversation_id == reply.conversation_id == run.conversation_id
        assert by_run[run.id].message_id == reply.id
