"""Avro topic contracts: the topic registry, typed records, the serde, schema ids.

The schemas in ``schemas/*.avsc`` are the contract with every consumer, ours and external
(analytics, billing). This package is how Python code honors it:

- :class:`Topics` / :func:`all_topics`: the only place topic names are written.
- ``records``: one frozen pydantic model per topic, checked against its schema by tests.
- :class:`Serde`: records <-> Confluent-framed Avro bytes; typed :class:`ContractError`.
- :func:`encode_key`: the key bytes that co-partition everything about a conversation.
- :class:`CatalogRegistry` / :class:`ConfluentRegistryClient`: where schema ids come from.
- :func:`check_backward`: the backward-compatibility rule every schema change must pass.

Typical producer / consumer use::

    serde = Serde.from_settings(settings.kafka)
    topic = Topics.RUN_COMPLETED
    await producer.send(topic.physical_name(settings.kafka),
                        key=encode_key(topic, record), value=serde.encode(topic, record))
    record = serde.decode(topic, message.value)   # raises ContractError(code=...) only

See docs/contracts.md for the decisions behind the wire format and schema evolution.
"""

from switchboard.contracts.compatibility import (
    Incompatibility,
    check_backward,
    check_backward_transitive,
    verify_by_samples,
)
from switchboard.contracts.enums import (
    AgentVersionStatus,
    ConcurrencyPolicy,
    DispatchOutcome,
    ErrorFamily,
    HandoffTrigger,
    InsightKind,
    InsightStatus,
    MessageContentType,
    PublishedChange,
    RunEventType,
    RunStatus,
    SteeringKind,
    Urgency,
    Vitality,
    WakeReason,
    Weekday,
)
from switchboard.contracts.errors import ContractError, ContractErrorCode
from switchboard.contracts.records import (
    Action,
    AgentPublished,
    AgentVersionSnapshot,
    BusinessHours,
    DeadLetter,
    DebugInfo,
    DispatchDecided,
    DispatcherTick,
    DispatchRequested,
    FollowUpConfig,
    HandoffTriggered,
    Header,
    HumanMessageRequested,
    InboundMessage,
    Insight,
    Record,
    RunCompleted,
    RunError,
    RunEvent,
    RunHeartbeat,
    RunRequested,
    RunStarted,
    SendTarget,
    SteeringMessage,
    SuggestedAction,
    ToolCall,
    ToolResult,
    TriggerConfig,
    UsageDelta,
    WakeContext,
    WeeklyWindow,
    utc_now,
)
from switchboard.contracts.registry import (
    CatalogRegistry,
    ConfluentRegistryClient,
    SchemaRegistry,
    registry_from_settings,
)
from switchboard.contracts.serde import (
    HEADER_SIZE,
    MAGIC_BYTE,
    Serde,
    decode_key,
    encode_key,
    frame,
    key_text,
    unframe,
)
from switchboard.contracts.topics import (
    CleanupPolicy,
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

__all__ = [
    "HEADER_SIZE",
    "MAGIC_BYTE",
    "Action",
    "AgentPublished",
    "AgentVersionSnapshot",
    "AgentVersionStatus",
    "BusinessHours",
    "CatalogRegistry",
    "CleanupPolicy",
    "ConcurrencyPolicy",
    "ConfluentRegistryClient",
    "ContractError",
    "ContractErrorCode",
    "DeadLetter",
    "DebugInfo",
    "DispatchDecided",
    "DispatchOutcome",
    "DispatchRequested",
    "DispatcherTick",
    "ErrorFamily",
    "FollowUpConfig",
    "HandoffTrigger",
    "HandoffTriggered",
    "Header",
    "HumanMessageRequested",
    "InboundMessage",
    "Incompatibility",
    "Insight",
    "InsightKind",
    "InsightStatus",
    "MessageContentType",
    "PublishedChange",
    "Record",
    "RunCompleted",
    "RunError",
    "RunEvent",
    "RunEventType",
    "RunHeartbeat",
    "RunRequested",
    "RunStarted",
    "RunStatus",
    "SchemaRegistry",
    "Scope",
    "SendTarget",
    "Serde",
    "SteeringKind",
    "SteeringMessage",
    "SuggestedAction",
    "ToolCall",
    "ToolResult",
    "TopicSpec",
    "Topics",
    "TriggerConfig",
    "Urgency",
    "UsageDelta",
    "Vitality",
    "WakeContext",
    "WakeReason",
    "Weekday",
    "WeeklyWindow",
    "all_topics",
    "check_backward",
    "check_backward_transitive",
    "conversation_topics",
    "decode_key",
    "encode_key",
    "frame",
    "key_text",
    "physical_name",
    "registry_from_settings",
    "topic_for_physical_name",
    "topic_for_record",
    "topic_named",
    "unframe",
    "utc_now",
    "verify_by_samples",
]
