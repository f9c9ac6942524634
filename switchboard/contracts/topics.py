"""The topic registry: the only place in the code base where a topic name is written.

Every producer, consumer, admin script and test takes a :class:`TopicSpec` from
:class:`Topics` (or :func:`all_topics`) and asks it for its physical name, partition count,
creation config, schema file and subject. A topic renamed here is renamed everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final, Generic, TypeVar

from switchboard.contracts.records import (
    AgentPublished,
    DeadLetter,
    DispatchDecided,
    DispatcherTick,
    DispatchRequested,
    HandoffTriggered,
    HumanMessageRequested,
    Insight,
    Record,
    RunCompleted,
    RunEvent,
    RunHeartbeat,
    RunRequested,
    RunStarted,
    SteeringMessage,
)
from switchboard.contracts.schemas import Schema, load_schema_file, schemas_dir
from switchboard.settings import KafkaSettings

R = TypeVar("R", bound=Record, covariant=True)

_DAY_MS: Final = 24 * 60 * 60 * 1000


class Scope(StrEnum):
    """What a topic's key identifies, hence which records share a partition."""

    CONVERSATION = "conversation"
    AGENT = "agent"
    ORG = "org"
    GLOBAL = "global"


class CleanupPolicy(StrEnum):
    """Kafka ``cleanup.policy``: age out records, or keep the latest per key."""

    DELETE = "delete"
    COMPACT = "compact"


@dataclass(frozen=True, slots=True)
class TopicSpec(Generic[R]):
    """Everything the code needs to know about one topic.

    ``partitions`` is ``None`` for conversation-scoped topics: they all take
    ``KafkaSettings.conversation_partitions``, because the dispatcher joins them by
    conversation and Kafka's default partitioner only co-locates equal keys when the
    partition counts are equal. ``retention_ms`` is ``None`` when the broker default
    applies (compacted topics keep the latest record per key forever).
    """

    name: str
    key_field: str
    record_type: type[R]
    scope: Scope
    partitions: int | None
    cleanup_policy: CleanupPolicy
    retention_ms: int | None
    doc: str

    def __post_init__(self) -> None:
        if (self.scope is Scope.CONVERSATION) != (self.partitions is None):
            raise ValueError(
                f"{self.name}: conversation-scoped topics, and only they, take their partition count from the settings"
            )
        if self.key_field not in self.record_type.model_fields:
            raise ValueError(f"{self.name}: key field {self.key_field!r} is not a field of {self.record_type.__name__}")

    @property
    def subject(self) -> str:
        """Schema registry subject of the value (TopicNameStrategy on the logical name)."""
        return f"{self.name}-value"

    @property
    def schema_file(self) -> str:
        """File name of the current schema in ``schemas/``."""
        return f"{self.name}.avsc"

    def schema_path(self, directory: Path | None = None) -> Path:
        return (directory or schemas_dir()) / self.schema_file

    def load_schema(self, directory: Path | None = None) -> Schema:
        """The current (writer and reader) schema of the topic, as JSON."""
        return load_schema_file(self.schema_path(directory))

    def physical_name(self, settings: KafkaSettings) -> str:
        """The name on the broker: the settings' prefix (per test, per environment) + name."""
        return f"{settings.topic_prefix}{self.name}"

    def partition_count(self, settings: KafkaSettings) -> int:
        return settings.conversation_partitions if self.partitions is None else self.partitions

    def config(self) -> dict[str, str]:
        """Topic-level configs for creation (Kafka wants string values)."""
        config = {"cleanup.policy": self.cleanup_policy.value}
        if self.retention_ms is not None:
            config["retention.ms"] = str(self.retention_ms)
        return config


class Topics:
    """The registry: one attribute per topic. Not instantiated; use the attributes."""

    DISPATCH_REQUESTED: Final = TopicSpec(
        name="dispatch_requested",
        key_field="conversation_id",
        record_type=DispatchRequested,
        scope=Scope.CONVERSATION,
        partitions=None,
        cleanup_policy=CleanupPolicy.DELETE,
        retention_ms=7 * _DAY_MS,
        doc="api -> dispatcher: something happened that may wake one agent.",
    )
    RUN_REQUESTED: Final = TopicSpec(
        name="run_requested",
        key_field="conversation_id",
        record_type=RunRequested,
        scope=Scope.CONVERSATION,
        partitions=None,
        cleanup_policy=CleanupPolicy.DELETE,
        retention_ms=7 * _DAY_MS,
        doc="dispatcher -> runner: run one agent version in one conversation.",
    )
    RUN_STARTED: Final = TopicSpec(
        name="run_started",
        key_field="conversation_id",
        record_type=RunStarted,
        scope=Scope.CONVERSATION,
        partitions=None,
        cleanup_policy=CleanupPolicy.DELETE,
        retention_ms=7 * _DAY_MS,
        doc="runner -> dispatcher, analytics: a run began.",
    )
    RUN_EVENTS: Final = TopicSpec(
        name="run_events",
        key_field="conversation_id",
        record_type=RunEvent,
        scope=Scope.CONVERSATION,
        partitions=None,
        cleanup_policy=CleanupPolicy.DELETE,
        # The highest-volume topic, read live (SSE); the full trace lives in PostgreSQL.
        retention_ms=3 * _DAY_MS,
        doc="runner -> api (SSE), analytics: typed stream events of a run.",
    )
    RUN_COMPLETED: Final = TopicSpec(
        name="run_completed",
        key_field="conversation_id",
        record_type=RunCompleted,
        scope=Scope.CONVERSATION,
        partitions=None,
        cleanup_policy=CleanupPolicy.DELETE,
        # Billing and analytics may replay a month of usage.
        retention_ms=35 * _DAY_MS,
        doc="runner -> dispatcher, notifier, brief, billing: outcome, usage and cost of a run.",
    )
    HANDOFF_TRIGGERED: Final = TopicSpec(
        name="handoff_triggered",
        key_field="conversation_id",
        record_type=HandoffTriggered,
        scope=Scope.CONVERSATION,
        partitions=None,
        cleanup_policy=CleanupPolicy.DELETE,
        retention_ms=14 * _DAY_MS,
        doc="runner -> notifier, brief: a run handed the conversation to humans.",
    )
    PUBLISHED: Final = TopicSpec(
        name="published",
        key_field="agent_id",
        record_type=AgentPublished,
        scope=Scope.AGENT,
        # Read whole by every dispatcher worker (a global table); tiny volume, and one
        # partition keeps the audit order of all publishes.
        partitions=1,
        cleanup_policy=CleanupPolicy.COMPACT,
        retention_ms=None,
        doc="api -> dispatcher, audit: the latest published state of each agent.",
    )
    INSIGHTS: Final = TopicSpec(
        name="insights",
        key_field="org_id",
        record_type=Insight,
        scope=Scope.ORG,
        partitions=6,
        cleanup_policy=CleanupPolicy.DELETE,
        retention_ms=30 * _DAY_MS,
        doc="runner -> brief: insights and proposed actions for the Home digest.",
    )
    STEERING: Final = TopicSpec(
        name="steering",
        key_field="conversation_id",
        record_type=SteeringMessage,
        scope=Scope.CONVERSATION,
        partitions=None,
        cleanup_policy=CleanupPolicy.DELETE,
        # Only meaningful while its run is active.
        retention_ms=1 * _DAY_MS,
        doc="dispatcher -> runner: a message for an active run.",
    )
    DEAD_LETTER: Final = TopicSpec(
        name="dead_letter",
        key_field="original_key",
        record_type=DeadLetter,
        scope=Scope.GLOBAL,
        partitions=1,
        cleanup_policy=CleanupPolicy.DELETE,
        retention_ms=30 * _DAY_MS,
        doc="any service -> operators: records that could not be decoded or processed.",
    )
    RUN_HEARTBEATS: Final = TopicSpec(
        name="run_heartbeats",
        key_field="conversation_id",
        record_type=RunHeartbeat,
        scope=Scope.CONVERSATION,
        partitions=None,
        cleanup_policy=CleanupPolicy.DELETE,
        # Only the latest few matter (a lease is seconds long); a day covers any replay.
        retention_ms=1 * _DAY_MS,
        doc="runner -> dispatcher: a run is still held by its runner (extends its lease).",
    )
    DISPATCHER_TICKS: Final = TopicSpec(
        name="dispatcher_ticks",
        key_field="conversation_id",
        record_type=DispatcherTick,
        scope=Scope.CONVERSATION,
        partitions=None,
        cleanup_policy=CleanupPolicy.DELETE,
        # Internal wake-ups, useless once processed.
        retention_ms=1 * _DAY_MS,
        doc="dispatcher -> dispatcher: re-evaluate a conversation (lease expired, deferred dispatch due).",
    )
    DISPATCH_DECISIONS: Final = TopicSpec(
        name="dispatch_decisions",
        key_field="conversation_id",
        record_type=DispatchDecided,
        scope=Scope.CONVERSATION,
        partitions=None,
        cleanup_policy=CleanupPolicy.DELETE,
        # The durable record is the dispatch_decisions table; the topic feeds it and analytics.
        retention_ms=7 * _DAY_MS,
        doc="dispatcher -> decision sink, analytics: every dispatch decision and why.",
    )
    HUMAN_MESSAGES: Final = TopicSpec(
        name="human_messages",
        key_field="conversation_id",
        record_type=HumanMessageRequested,
        scope=Scope.CONVERSATION,
        partitions=None,
        cleanup_policy=CleanupPolicy.DELETE,
        # Sent within seconds; a week covers any outage and replay (the message row is the record).
        retention_ms=7 * _DAY_MS,
        doc="api -> notifier: a person's message to the customer, to send once.",
    )


_ALL: Final[tuple[TopicSpec[Record], ...]] = (
    Topics.DISPATCH_REQUESTED,
    Topics.RUN_REQUESTED,
    Topics.RUN_STARTED,
    Topics.RUN_EVENTS,
    Topics.RUN_COMPLETED,
    Topics.HANDOFF_TRIGGERED,
    Topics.PUBLISHED,
    Topics.INSIGHTS,
    Topics.STEERING,
    Topics.DEAD_LETTER,
    Topics.RUN_HEARTBEATS,
    Topics.DISPATCHER_TICKS,
    Topics.DISPATCH_DECISIONS,
    Topics.HUMAN_MESSAGES,
)
_BY_NAME: Final = {topic.name: topic for topic in _ALL}
_BY_RECORD: Final = {topic.record_type: topic for topic in _ALL}


def all_topics() -> tuple[TopicSpec[Record], ...]:
    """Every topic, in a stable order (the order of the catalog's schema ids)."""
    return _ALL


def conversation_topics() -> tuple[TopicSpec[Record], ...]:
    """The topics that must share one partition count (checked by the admin code)."""
    return tuple(topic for topic in _ALL if topic.scope is Scope.CONVERSATION)


def topic_named(name: str) -> TopicSpec[Record]:
    """The topic with this logical name (no prefix); ``KeyError`` when there is none."""
    return _BY_NAME[name]


def topic_for_record(record_type: type[R]) -> TopicSpec[R]:
    """The one topic that carries this record type."""
    return _BY_RECORD[record_type]  # type: ignore[return-value]


def physical_name(topic: TopicSpec[R], settings: KafkaSettings) -> str:
    """Module-level alias of :meth:`TopicSpec.physical_name`."""
    return topic.physical_name(settings)


def topic_for_physical_name(name: str, settings: KafkaSettings) -> TopicSpec[Record] | None:
    """Reverse of :func:`physical_name` (e.g. for a dead letter's ``original_topic``)."""
    prefix = settings.topic_prefix
    if not name.startswith(prefix):
        return None
    return _BY_NAME.get(name[len(prefix) :])
