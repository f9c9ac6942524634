"""Running the shared consumer in a test until a condition holds (real broker)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from switchboard.contracts import Topics
from switchboard.kafka.consumer import ErrorPolicy, Inbound, RecordConsumer
from switchboard.kafka.dead_letter import DeadLetterPublisher
from switchboard.kafka.producer import RecordProducer
from switchboard.settings import KafkaSettings

FAST_RETRIES = ErrorPolicy(max_attempts=3, initial_backoff_s=0.01, max_backoff_s=0.05)


async def consume_run_started_until(
    settings: KafkaSettings,
    group_id: str,
    handler: Callable[[Inbound], Awaitable[None]],
    done: Callable[[], bool],
    policy: ErrorPolicy = FAST_RETRIES,
) -> None:
    """Consume ``run_started`` with a real dead-letter publisher until ``done()`` (30 s at most)."""
    async with RecordProducer(settings, service="test-consumer") as dlq_producer:
        consumer = RecordConsumer(
            service="test-consumer",
            kafka=settings,
            topics=[Topics.RUN_STARTED],
            group_id=group_id,
            handler=handler,
            policy=policy,
            dead_letters=DeadLetterPublisher(dlq_producer, service="test-consumer", consumer_group=group_id),
        )
        stop = asyncio.Event()
        task = asyncio.create_task(consumer.run(stop))
        try:
            for _ in range(300):
                if done() or task.done():
                    break
                await asyncio.sleep(0.1)
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
