"""Create the registered topics, idempotently, and check they are shaped as registered.

``switchboard topics create`` calls :func:`ensure_topics`. A topic that exists
is left alone, except that a partition count different from the registry is an
error: conversation-scoped topics must share one count, or one conversation's
records would be processed by different dispatcher workers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, KafkaError, TopicAlreadyExistsError

from switchboard.contracts import TopicSpec, all_topics
from switchboard.observability.logging import get_logger
from switchboard.settings import KafkaSettings

log = get_logger(__name__)


class TopicShapeError(RuntimeError):
    """An existing topic does not match the registry (e.g. wrong partition count)."""

    code = "topic_shape_mismatch"


async def _connect(settings: KafkaSettings, wait_s: float) -> AIOKafkaAdminClient:
    """Connect, retrying until the broker answers or ``wait_s`` elapsed."""
    deadline = time.monotonic() + wait_s
    while True:
        admin = AIOKafkaAdminClient(**settings.client_options(), client_id=f"{settings.client_id}-admin")
        try:
            await admin.start()
            await admin.list_topics()
            return admin
        except KafkaError:
            await admin.close()
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(0.5)
        except BaseException:
            # Cancelled (a readiness probe's timeout) or failed otherwise: the client's connections
            # and tasks go with it — left open, every probe during a broker slowdown leaked one.
            await asyncio.shield(admin.close())
            raise


async def _partition_counts(
    admin: AIOKafkaAdminClient, names: Iterable[str], *, settle_s: float = 10.0
) -> dict[str, int]:
    """Partition count per existing topic; waits briefly for just-created topics to show up."""
    wanted = list(names)
    deadline = time.monotonic() + settle_s
    while True:
        described = await admin.describe_topics(wanted)
        counts = {t["topic"]: len(t["partitions"]) for t in described if t.get("error_code", 0) == 0}
        if len(counts) == len(wanted) or time.monotonic() >= deadline:
            return counts
        await asyncio.sleep(0.2)


async def ensure_topics(
    settings: KafkaSettings, *, topics: Iterable[TopicSpec[Any]] | None = None, wait_s: float = 30.0
) -> list[str]:
    """Create every missing registered topic; return the physical names created."""
    specs = list(topics if topics is not None else all_topics())
    admin = await _connect(settings, wait_s)
    try:
        existing = set(await admin.list_topics())
        wanted = {spec.physical_name(settings): spec for spec in specs}
        missing = [
            NewTopic(
                name=name,
                num_partitions=spec.partition_count(settings),
                replication_factor=settings.replication_factor,
                topic_configs=spec.config(),
            )
            for name, spec in wanted.items()
            if name not in existing
        ]
        created: list[str] = []
        if missing:
            try:
                await admin.create_topics(missing)
                created = [t.name for t in missing]
            except TopicAlreadyExistsError:
                # Another process created some concurrently: fine, the shape check below decides.
                created = []
            log.info("topics created", extra={"topics": created})
        counts = await _partition_counts(admin, wanted)
        wrong = {
            name: (counts.get(name), spec.partition_count(settings))
            for name, spec in wanted.items()
            if counts.get(name) != spec.partition_count(settings)
        }
        if wrong:
            raise TopicShapeError(f"topics with unexpected partition counts (have, want): {wrong}")
        return sorted(created)
    finally:
        await admin.close()


async def delete_topics(settings: KafkaSettings, *, topics: Iterable[TopicSpec[Any]] | None = None) -> None:
    """Delete the registered topics under ``settings.topic_prefix`` (tests clean up with it)."""
    specs = list(topics if topics is not None else all_topics())
    admin = await _connect(settings, 10.0)
    try:
        existing = set(await admin.list_topics())
        names = [spec.physical_name(settings) for spec in specs if spec.physical_name(settings) in existing]
        if names:
            await admin.delete_topics(names)
    finally:
        await admin.close()


async def describe_topics(settings: KafkaSettings, *, wait_s: float = 10.0) -> list[dict[str, Any]]:
    """The registry next to what the broker has: name, key, partitions wanted and actual."""
    specs = list(all_topics())
    try:
        admin = await _connect(settings, wait_s)
    except KafkaConnectionError:
        counts: dict[str, int] = {}
    else:
        try:
            existing = set(await admin.list_topics())
            counts = await _partition_counts(
                admin, [s.physical_name(settings) for s in specs if s.physical_name(settings) in existing]
            )
        finally:
            await admin.close()
    return [
        {
            "topic": spec.physical_name(settings),
            "key": spec.key_field,
            "partitions": spec.partition_count(settings),
            "on_broker": counts.get(spec.physical_name(settings)),
            "config": spec.config(),
        }
        for spec in specs
    ]


async def broker_answers(settings: KafkaSettings, *, timeout_s: float = 2.0) -> bool:
    """True when the broker answers a metadata request within ``timeout_s`` (readiness probes)."""
    try:
        admin = await asyncio.wait_for(_connect(settings, 0.0), timeout=timeout_s)
    except (KafkaError, TimeoutError, OSError):
        return False
    await admin.close()
    return True
