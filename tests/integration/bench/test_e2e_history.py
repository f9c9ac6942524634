"""The end-to-end benchmark's history (bench/e2e_history.py): a finished past the load never touches."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import func, select

from bench.e2e_history import seed_history
from switchboard.db.models import AiAgentRun, Message
from switchboard.db.models.channels import Conversation
from switchboard.db.models.notifications import RunDelivery
from tests.integration.brief.scene import make_scene
from tests.support.agents import tenant_session
from tests.support.stack import StackEndpoints


def test_the_history_is_a_finished_past_of_the_orgs_own_agent_and_session(stack: StackEndpoints) -> None:
    scene = make_scene(stack.database_url)
    seed_history(stack.database_owner_url, str(scene.org_id), conversations=40, exchanges=3)

    with tenant_session(scene.org) as session:
        runs = session.scalars(select(AiAgentRun).where(AiAgentRun.org_id == scene.org_id)).all()
        messages = {m.id: m for m in session.scalars(select(Message).where(Message.org_id == scene.org_id))}
        deliveries = session.scalars(select(RunDelivery).where(RunDelivery.org_id == scene.org_id)).all()
        conversations = session.scalar(
            select(func.count()).select_from(Conversation).where(Conversation.org_id == scene.org_id)
        )

    assert (len(runs), len(messages), len(deliveries), conversations) == (120, 240, 120, 40 + 1)
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
