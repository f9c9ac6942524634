"""The decision sink writes dispatch_decisions once per decision, under the org's RLS."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text

from services.dispatcher.sink import DecisionSink
from services.dispatcher.state import derived_id
from switchboard.contracts import DispatchDecided, DispatchOutcome, Topics, WakeReason
from switchboard.db.session import create_async_engine, tenant_transaction
from switchboard.kafka.consumer import Inbound
from tests.integration.db.conftest import MigratedDatabase
from tests.integration.db.factories import create_conversation, create_org

pytestmark = pytest.mark.integration


@pytest.fixture
async def sink(dispatcher_db: MigratedDatabase) -> AsyncIterator[DecisionSink]:
    engine = create_async_engine(dispatcher_db.app_url)
    yield DecisionSink(engine)
    await engine.dispose()


def decision(org: uuid.UUID, conversation: uuid.UUID, outcome: DispatchOutcome, **kw: object) -> Inbound:
    dispatch_id = uuid.uuid4()
    record = DispatchDecided(
        event_id=derived_id("decision", dispatch_id, outcome.value, kw.get("run_id")),
        org_id=org,
        conversation_id=conversation,
        dispatch_event_id=dispatch_id,
        outcome=outcome,
        message_ids=(uuid.uuid4(),),
        dispatch_ids=(dispatch_id,),
        wake_reason=WakeReason.USER_MESSAGE,
        reason="because",
        details_json='{"policy":"enqueue"}',
        **kw,  # type: ignore[arg-type]
    )
    return Inbound(topic=Topics.DISPATCH_DECISIONS, partition=0, offset=0, key=None, value=record)


def rows(db: MigratedDatabase, org: uuid.UUID) -> list:
    with db.owner_session() as session, tenant_transaction(session, org):
        return list(
            session.execute(
                text(
                    "SELECT decision_id, outcome, conversation_id, inbound_message_id, run_id, details"
                    " FROM dispatch_decisions WHERE org_id = :o ORDER BY created_at"
                ),
                {"o": org},
            )
        )


async def test_decisions_are_stored_once_with_unknown_references_as_null(
    sink: DecisionSink, dispatcher_db: MigratedDatabase
) -> None:
    org = uuid.uuid4()
    with dispatcher_db.owner_session() as session, tenant_transaction(session, org):
        create_org(session, org)
        conversation = create_conversation(session, org).id
    known = decision(org, conversation, DispatchOutcome.QUEUED)
    dangling = decision(org, uuid.uuid4(), DispatchOutcome.DISPATCHED, run_id=uuid.uuid4(), attempt=1)
    await sink.write([known, dangling])
    await sink.write([known, dangling])  # a replay
    stored = rows(dispatcher_db, org)
    assert len(stored) == 2
    by_outcome = {r.outcome: r for r in stored}
    assert by_outcome["queued"].conversation_id == conversation
    assert by_outcome["dispatched"].conversation_id is None, "a conversation the org cannot see is not linked"
    assert by_outcome["dispatched"].inbound_message_id is None
    assert by_outcome["dispatched"].run_id == dangling.value.run_id
    details = by_outcome["queued"].details
    assert details["policy"] == "enqueue" and details["reason"] == "because"
    assert details["message_ids"] == [str(known.value.message_ids[0])]


async def test_decisions_of_an_unknown_org_are_dropped_not_failed(sink: DecisionSink) -> None:
    await sink.write([decision(uuid.uuid4(), uuid.uuid4(), DispatchOutcome.NO_MATCH)])
