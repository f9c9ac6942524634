"""Keeps the published-agent index (``agents.AgentIndex``) in step with the ``published`` topic.

A plain aiokafka consumer *without a group*: every dispatcher worker reads every
partition of the compacted topic from the beginning, then follows it. The worker is
ready to dispatch only once the index caught up with the end offsets seen at start, so
the first messages after a restart are never judged against an empty index.

A record that cannot be decoded is logged and skipped (every worker would meet it, so it
is not dead-lettered once per worker); an agent it concerned keeps its previous state.
"""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from services.dispatcher import metrics
from services.dispatcher.agents import AgentIndex
from switchboard.contracts import AgentPublished, ContractError, Serde, Topics
from switchboard.kafka.decoding import decode_waiting
from switchboard.observability.logging import get_logger
from switchboard.settings import KafkaSettings

log = get_logger(__name__)


class PublishedFeed:
    def __init__(self, kafka: KafkaSettings, serde: Serde, index: AgentIndex) -> None:
        self._kafka = kafka
        self._serde = serde
        self._index = index
        self.caught_up = asyncio.Event()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self._follow(stop)
            except KafkaError:
                log.warning("published feed lost the broker; reconnecting", exc_info=True)
                await _sleep_or_stop(stop, 1.0)

    async def _follow(self, stop: asyncio.Event) -> None:
        name = Topics.PUBLISHED.physical_name(self._kafka)
        consumer = AIOKafkaConsumer(
            **self._kafka.client_options(),
            client_id=f"{self._kafka.client_id}-dispatcher-published",
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )
        await consumer.start()
        try:
            while name not in await consumer.topics():
                # Not created yet (``switchboard topics create`` creates it): wait for it.
                if not await _sleep_or_stop(stop, 0.5):
                    return
            # The registry is authoritative for the shape (``ensure_topics`` checks it).
            tps = [TopicPartition(name, p) for p in range(Topics.PUBLISHED.partition_count(self._kafka))]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            log.info(
                "reading published agents",
                extra={"topic": name, "end_offsets": {tp.partition: o for tp, o in ends.items()}},
            )
            await self._check_caught_up(consumer, ends)
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=250, max_records=1000)
                for records in batches.values():
                    for raw in records:
                        await self._apply(raw.value, raw.offset)
                await self._check_caught_up(consumer, ends)
                metrics.PUBLISHED_AGENTS.set(len(self._index))
        finally:
            await consumer.stop()

    async def _apply(self, value: bytes | None, offset: int) -> None:
        try:
            # The registry down: wait for it (skipped, the index lost that agent's version for good).
            record = await decode_waiting(self._serde, Topics.PUBLISHED, value, {"offset": offset})
        except ContractError as exc:
            log.error("undecodable published record skipped", extra={"offset": offset, "error_code": str(exc.code)})
            return
        assert isinstance(record, AgentPublished)
        self._index.apply(record)

    async def _check_caught_up(self, consumer: AIOKafkaConsumer, ends: dict[TopicPartition, int]) -> None:
        if self.caught_up.is_set():
            return
        for tp, end in ends.items():
            if end > 0 and await consumer.position(tp) < end:
                return
        self.caught_up.set()
        log.info("published agents index caught up", extra={"agents": len(self._index)})


async def _sleep_or_stop(stop: asyncio.Event, delay: float) -> bool:
    """Sleep ``delay`` seconds; False when ``stop`` was set meanwhile."""
    try:
        await asyncio.wait_for(stop.wait(), timeout=delay)
    except TimeoutError:
        return True
    return False
