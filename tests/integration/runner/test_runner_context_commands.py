"""Slash commands in the run (issue 6 item 4): a malformed known command gets a clear reply, no model call;
an unknown command is plain text for the model."""

from __future__ import annotations

import pytest

from switchboard.contracts import RunCompleted
from switchboard.slash_commands import ParseError, parse
from tests.integration.runner.harness import RunnerHarness, command, create_agent, inbound, run_request
from tests.support.fake_llm import Reply

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("body", "writer"), [("/goal grow sales --budget abc", "owner"), ("/todo", "customer")])
async def test_a_malformed_command_is_answered_with_what_is_wrong_without_a_model_call(
    rh: RunnerHarness, body: str, writer: str
) -> None:
    """The owner's malformed /goal, and a /todo anyone may write, get the parser's message."""
    agent = create_agent(rh.db)
    with pytest.raises(ParseError) as expected:
        parse(body)
    before = len(rh.fake.received)
    written = command(rh.db, agent, body) if writer == "owner" else inbound(rh.db, agent, body)

    row = await rh.run(run_request(agent, [written]))

    assert row.status == "completed" and row.vitality == "completed"
    assert row.final_text == expected.value.message
    assert expected.value.code in (row.summary or "")
    assert len(rh.fake.received) == before and row.steps_count == 0
    assert row.would_send_to is not None  # the notifier sends the reply like any answer
    completed = next(r for _, r in rh.outbox(agent.conversation_id) if isinstance(r, RunCompleted))
    assert completed.final_text == expected.value.message


async def test_an_unknown_command_reaches_the_model_as_plain_text(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db)
    rh.fake.script([Reply(text="ok")])
    before = len(rh.fake.received)
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, "/weather in Rome?")]))
    assert row.status == "completed" and row.final_text == "ok"
    assert "/weather in Rome?" in str(rh.fake.received[before].body)


@pytest.mark.parametrize(
    "body", ["/goal grow sales --budget 500", "/plan win the deal", "/goal grow sales --budget abc"]
)
async def test_a_customer_cannot_command_the_agent(rh: RunnerHarness, body: str) -> None:
    """A customer's ``/goal --budget 500`` starts no billed autonomous work and ``/plan`` switches
    no mode: the agent reads the text like any other message (docs/agent-context.md)."""
    agent = create_agent(rh.db)
    rh.fake.script([Reply(text="How can I help?")])
    before = len(rh.fake.received)
    row = await rh.run(run_request(agent, [inbound(rh.db, agent, body)]))
    assert row.status == "completed" and row.final_text == "How can I help?"
    assert body in str(rh.fake.received[before].body), "the model saw the customer's words as written"
    assert rh.scalar(agent.org_id, "SELECT count(*) FROM conversation_goals") == 0
    mode = rh.scalar(agent.org_id, "SELECT count(*) FROM conversation_modes")
    assert mode == 0
