"""Publishing records that could not be decoded or processed to the dead-letter topic.

A dead letter carries the original key and bytes unchanged, so an operator can
inspect, fix and replay it; and it says where it came from (topic, partition,
offset, consumer group), which service gave up, after how many attempts, and why
(a stable error code plus a scrubbed message). The same facts are repeated as
``dlq.*`` headers for tools that cannot decode Avro.
"""

from __future__ import annotations

from datetime import UTC, datetime

from aiokafka import ConsumerRecord

from switchboard.contracts import DeadLetter, Header, Topics
from switchboard.kafka.consumer import Failure
from switchboard.kafka.producer import RecordProducer


def dead_letter_for(
    record: ConsumerRecord[bytes, bytes], failure: Failure, *, service: str, consumer_group: str | None
) -> DeadLetter:
    """The dead-letter record describing ``record`` and why it failed."""
    return DeadLetter(
        original_topic=record.topic,
        original_partition=record.partition,
        original_offset=record.offset,
        original_timestamp=datetime.fromtimestamp(record.timestamp / 1000, UTC) if record.timestamp else None,
        original_key=record.key,
        original_value=record.value,
        original_headers=tuple(Header(key=k, value=v) for k, v in (record.headers or ())),
        error_code=failure.code,
        error_message=failure.message,
        failed_at=datetime.now(UTC),
        service=service,
        consumer_group=consumer_group,
        attempts=failure.attempts,
    )


class DeadLetterPublisher:
    """The consumer's :class:`~switchboard.kafka.consumer.DeadLetterSink` backed by a producer."""

    def __init__(self, producer: RecordProducer, *, service: str, consumer_group: str | None) -> None:
        self._producer = producer
        self._service = service
        self._group = consumer_group

    async def publish(
        self, record: ConsumerRecord[bytes, bytes], failure: Failure, *, omit_value: bool = False
    ) -> None:
        """``omit_value``: the record's bytes do not fit in a letter (the broker's size limit): the
        letter names where they are (topic, partition, offset — the topic keeps them until its
        retention) and says so in ``dlq.value_omitted``."""
        letter = dead_letter_for(record, failure, service=self._service, consumer_group=self._group)
        headers = [
            ("dlq.original_topic", record.topic.encode()),
            ("dlq.original_partition", str(record.partition).encode()),
            ("dlq.original_offset", str(record.offset).encode()),
            ("dlq.error_code", failure.code.encode()),
            ("dlq.service", self._service.encode()),
        ]
        if omit_value:
            letter = letter.model_copy(update={"original_value": None})
            headers.append(("dlq.value_omitted", b"true"))
        await self._producer.send(Topics.DEAD_LETTER, letter, headers=headers)
