"""The topic registry: names, keys, partition counts and creation configs."""

from __future__ import annotations

import pytest

from switchboard.contracts import (
    CleanupPolicy,
    Record,
    Scope,
    Topics,
    TopicSpec,
    all_topics,
    conversation_topics,
    physical_name,
    topic_for_physical_name,
    topic_for_record,
    topic_named,
)
from switchboard.contracts.records import DispatchRequested
from switchboard.settings import KafkaSettings

SPEC_TOPICS = {
    "dispatch_requested",
    "run_requested",
    "run_started",
    "run_events",
    "run_completed",
    "handoff_triggered",
    "published",
    "insights",
    "steering",
    "dead_letter",
    # The dispatcher's own contracts (issue 4): heartbeats, internal ticks, decisions.
    "run_heartbeats",
    "dispatcher_ticks",
    "dispatch_decisions",
    # A person's message to the customer after a handoff (api -> notifier).
    "human_messages",
}


def test_the_registry_has_exactly_the_spec_topics() -> None:
    names = [t.name for t in all_topics()]
    assert set(names) == SPEC_TOPICS and len(names) == len(SPEC_TOPICS)
    assert len({t.record_type for t in all_topics()}) == len(SPEC_TOPICS)
    assert all(getattr(Topics, t.name.upper()) is t for t in all_topics())


@pytest.mark.parametrize("topic", all_topics(), ids=lambda t: t.name)
def test_each_topic_is_consistent_with_its_schema(topic: TopicSpec[Record]) -> None:
    schema = topic.load_schema()
    assert schema["name"] == topic.record_type.__name__
    key = next(f for f in schema["fields"] if f["name"] == topic.key_field)
    if topic is Topics.DEAD_LETTER:
        assert key["type"] == ["null", "bytes"]
    else:
        assert key["type"] == {"type": "string", "logicalType": "uuid"}, "keys are required uuids"
    assert topic_named(topic.name) is topic
    assert topic_for_record(topic.record_type) is topic
    assert topic.subject == f"{topic.name}-value"


def test_conversation_topics_share_the_configured_partition_count() -> None:
    settings = KafkaSettings(conversation_partitions=12)
    conversation = conversation_topics()
    assert {t.name for t in conversation} == {
        "dispatch_requested",
        "run_requested",
        "run_started",
        "run_events",
        "run_completed",
        "handoff_triggered",
        "steering",
        "run_heartbeats",
        "dispatcher_ticks",
        "dispatch_decisions",
        "human_messages",
    }
    assert {t.partition_count(settings) for t in conversation} == {12}
    assert all(t.key_field == "conversation_id" for t in conversation)
    assert Topics.PUBLISHED.partition_count(settings) == 1


def test_scopes_and_keys() -> None:
    assert (Topics.PUBLISHED.scope, Topics.PUBLISHED.key_field) == (Scope.AGENT, "agent_id")
    assert (Topics.INSIGHTS.scope, Topics.INSIGHTS.key_field) == (Scope.ORG, "org_id")
    assert Topics.DEAD_LETTER.scope is Scope.GLOBAL


def test_physical_names_carry_the_prefix() -> None:
    settings = KafkaSettings(topic_prefix="t-3f2a.")
    assert Topics.RUN_EVENTS.physical_name(settings) == "t-3f2a.run_events"
    assert physical_name(Topics.RUN_EVENTS, settings) == "t-3f2a.run_events"
    assert topic_for_physical_name("t-3f2a.run_events", settings) is Topics.RUN_EVENTS
    assert topic_for_physical_name("run_events", settings) is None
    assert topic_for_physical_name("t-3f2a.nope", settings) is None
    assert Topics.RUN_EVENTS.physical_name(KafkaSettings(topic_prefix="")) == "run_events"


def test_creation_configs() -> None:
    assert Topics.PUBLISHED.config() == {"cleanup.policy": "compact"}
    config = Topics.RUN_COMPLETED.config()
    assert config["cleanup.policy"] == "delete"
    assert int(config["retention.ms"]) >= 30 * 24 * 3600 * 1000  # a month of billing replay
    for topic in all_topics():
        assert all(isinstance(v, str) for v in topic.config().values())
        if topic.cleanup_policy is CleanupPolicy.DELETE:
            assert "retention.ms" in topic.config()


def test_a_spec_that_breaks_the_rules_is_refused() -> None:
    with pytest.raises(ValueError, match="conversation-scoped"):
        TopicSpec(
            name="x",
            key_field="conversation_id",
            record_type=DispatchRequested,
            scope=Scope.CONVERSATION,
            partitions=3,
            cleanup_policy=CleanupPolicy.DELETE,
            retention_ms=None,
            doc="",
        )
    with pytest.raises(ValueError, match="key field"):
        TopicSpec(
            name="x",
            key_field="nope",
            record_type=DispatchRequested,
            scope=Scope.CONVERSATION,
            partitions=None,
            cleanup_policy=CleanupPolicy.DELETE,
            retention_ms=None,
            doc="",
        )
