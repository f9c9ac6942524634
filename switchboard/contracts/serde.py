"""Records to bytes and back: Avro bodies in the Confluent wire format, UTF-8 string keys.

Value frame (what every Confluent-compatible tool expects)::

    byte 0      magic byte, always 0
    bytes 1-4   schema id, unsigned 32-bit big-endian (catalog or registry id)
    bytes 5-    Avro binary body, schemaless (no embedded schema, no container header)

Decoding reads the WRITER schema by the id in the frame and resolves it against the
topic's current READER schema (Avro schema resolution), so records written by an older
producer still decode after a backward-compatible change. Every failure is a
:class:`ContractError` with a stable code; nothing else escapes :meth:`Serde.decode`.

:meth:`Serde.decode_async` is the same for code on an event loop: a schema id not seen before
is resolved on a worker thread (the HTTP registry's call must not stop the loop).

Keys are the UTF-8 text of the record's key field (e.g. the conversation id in canonical
lowercase hyphenated form). Equal keys hash equally under Kafka's default murmur2
partitioner, so with equal partition counts every conversation-scoped topic puts one
conversation on the same partition number.
"""

from __future__ import annotations

import asyncio
import io
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar
from uuid import UUID

from fastavro import schemaless_reader, schemaless_writer
from pydantic import ValidationError

from switchboard.contracts.compatibility import check_backward
from switchboard.contracts.errors import ContractError, ContractErrorCode
from switchboard.contracts.records import Record
from switchboard.contracts.registry import SchemaRegistry, registry_from_settings
from switchboard.contracts.schemas import ParsedSchema, Schema, canonical_json, parse_cached
from switchboard.contracts.topics import TopicSpec
from switchboard.settings import KafkaSettings

R = TypeVar("R", bound=Record)

MAGIC_BYTE: Final = 0
_HEADER: Final = struct.Struct(">bI")  # magic byte, schema id
HEADER_SIZE: Final = _HEADER.size  # 5


# --------------------------------------------------------------------------- frames


def frame(schema_id: int, body: bytes) -> bytes:
    """Prefix an Avro body with the magic byte and the schema id."""
    return _HEADER.pack(MAGIC_BYTE, schema_id) + body


def unframe(data: bytes | None) -> tuple[int, bytes]:
    """Split a framed value into (schema id, Avro body), checking the header."""
    if not data:
        raise ContractError(
            ContractErrorCode.TRUNCATED_FRAME, "the value is empty (a tombstone, or not an Avro record)"
        )
    if data[0] != MAGIC_BYTE:
        raise ContractError(
            ContractErrorCode.BAD_MAGIC_BYTE, f"first byte is {data[0]:#04x}, expected 0x00 (Confluent wire format)"
        )
    if len(data) < HEADER_SIZE:
        raise ContractError(
            ContractErrorCode.TRUNCATED_FRAME, f"the value has {len(data)} bytes, fewer than the 5-byte header"
        )
    _, schema_id = _HEADER.unpack_from(data)
    return schema_id, bytes(data[HEADER_SIZE:])


# --------------------------------------------------------------------------- keys


def key_text(topic: TopicSpec[R], record: R) -> str | None:
    """The key of a record as text (``None`` only for a dead letter of a keyless record)."""
    value = getattr(record, topic.key_field)
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def encode_key(topic: TopicSpec[R], record: R) -> bytes | None:
    """The Kafka key bytes of a record: the UTF-8 text of its key field.

    A dead letter keeps the original key bytes untouched, so it lands where an operator
    replaying it expects and nothing is lost if the key was not UTF-8.
    """
    value = getattr(record, topic.key_field)
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    if isinstance(value, UUID):
        return str(value).encode("ascii")
    return str(value).encode("utf-8")


def decode_key(data: bytes | None) -> str | None:
    """Key bytes back to text; undecodable bytes are replaced, never raised."""
    return None if data is None else data.decode("utf-8", errors="replace")


# --------------------------------------------------------------------------- serde


@dataclass(frozen=True, slots=True)
class _WriterPlan:
    """How to read bodies written with one schema id on one topic (cached per pair)."""

    writer: ParsedSchema
    reader: ParsedSchema | None  # None: the writer schema is the reader schema
    problems: tuple[str, ...]  # non-empty: this writer cannot be read on this topic


class Serde:
    """Encodes and decodes the records of every topic; one instance per process.

    Thread-safe for use from serializer callbacks; all lookups are cached after the
    first record of each (topic, schema id).
    """

    def __init__(self, registry: SchemaRegistry, *, schemas_directory: Path | None = None) -> None:
        self.registry = registry
        self._directory = schemas_directory
        self._current: dict[str, tuple[Schema, ParsedSchema]] = {}
        self._write_ids: dict[str, int] = {}
        self._plans: dict[tuple[str, int], _WriterPlan] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: KafkaSettings, *, schemas_directory: Path | None = None) -> Serde:
        """The catalog without a registry URL, the HTTP registry with one."""
        return cls(registry_from_settings(settings, directory=schemas_directory), schemas_directory=schemas_directory)

    # -- schemas

    def current_schema(self, topic: TopicSpec[Any]) -> tuple[Schema, ParsedSchema]:
        """The topic's current schema (JSON, parsed): what we write and read with."""
        cached = self._current.get(topic.name)
        if cached is None:
            schema = topic.load_schema(self._directory)
            cached = (schema, parse_cached(schema))
            self._current[topic.name] = cached
        return cached

    def schema_id(self, topic: TopicSpec[Any]) -> int:
        """The id that frames records written now on ``topic``."""
        schema_id = self._write_ids.get(topic.name)
        if schema_id is None:
            schema, _ = self.current_schema(topic)
            schema_id = self.registry.id_for(topic.subject, schema)
            self._write_ids[topic.name] = schema_id
        return schema_id

    def preload(self, topics: list[TopicSpec[Any]]) -> None:
        """Resolve schemas and ids up front so a misconfiguration fails at startup."""
        for topic in topics:
            self.schema_id(topic)

    # -- values

    def encode(self, topic: TopicSpec[R], record: R) -> bytes:
        """The framed Avro value of ``record`` on ``topic``."""
        if type(record) is not topic.record_type:
            raise ContractError(
                ContractErrorCode.INVALID_RECORD,
                f"topic {topic.name} carries {topic.record_type.__name__}, not {type(record).__name__}",
            )
        _, parsed = self.current_schema(topic)
        schema_id = self.schema_id(topic)
        buffer = io.BytesIO()
        try:
            # model_dump() is written as is: fastavro takes StrEnum members for enums and
            # tuples for arrays (the serde tests round-trip every union branch). Converting
            # them to plain strings and lists first cost a quarter of the encode time.
            schemaless_writer(buffer, parsed, record.model_dump())
        except Exception as exc:
            raise ContractError(
                ContractErrorCode.INVALID_RECORD,
                f"{topic.name}: the record does not fit its schema: {type(exc).__name__}: {exc}",
            ) from exc
        return frame(schema_id, buffer.getvalue())

    def decode(self, topic: TopicSpec[R], data: bytes | None) -> R:
        """The record in a framed Avro value read from ``topic``.

        Raises only :class:`ContractError`: ``truncated_frame``, ``bad_magic_byte``,
        ``unknown_schema_id``, ``schema_mismatch``, ``undecodable_body``,
        ``invalid_record``, or ``registry_unavailable`` (the only retryable one).
        """
        schema_id, body = unframe(data)
        plan = self._plan(topic, schema_id)
        if plan.problems:
            raise ContractError(
                ContractErrorCode.SCHEMA_MISMATCH,
                f"{topic.name}: schema id {schema_id} cannot be read with the "
                f"current schema: {'; '.join(plan.problems[:3])}",
            )
        buffer = io.BytesIO(body)
        try:
            datum = schemaless_reader(buffer, plan.writer, plan.reader)
        except Exception as exc:
            code = (
                ContractErrorCode.SCHEMA_MISMATCH
                if type(exc).__name__ == "SchemaResolutionError"
                else ContractErrorCode.UNDECODABLE_BODY
            )
            raise ContractError(code, f"{topic.name}: schema id {schema_id}: {type(exc).__name__}: {exc}") from exc
        if buffer.tell() != len(body):
            raise ContractError(
                ContractErrorCode.UNDECODABLE_BODY,
                f"{topic.name}: schema id {schema_id}: {len(body) - buffer.tell()} trailing bytes after the record",
            )
        try:
            return topic.record_type.model_validate(datum)
        except ValidationError as exc:
            raise ContractError(
                ContractErrorCode.INVALID_RECORD,
                f"{topic.name}: decoded record breaks its contract: "
                f"{exc.error_count()} error(s), first: "
                f"{exc.errors()[0]['loc']} {exc.errors()[0]['msg']}",
            ) from exc

    async def decode_async(self, topic: TopicSpec[R], data: bytes | None) -> R:
        """:meth:`decode` for the event loop: a record framed with a schema id not seen before is
        decoded on a worker thread, since its writer schema may come from the HTTP registry (up to
        its timeout, 5 s, and again on every record while the registry is down: a call on the loop
        stopped every other task of the process — heartbeats, health probes — meanwhile). Seen ids,
        the steady state, decode inline."""
        if data is not None and len(data) >= HEADER_SIZE:
            magic, schema_id = _HEADER.unpack_from(data)
            if magic == MAGIC_BYTE and (topic.name, schema_id) not in self._plans:
                return await asyncio.to_thread(self.decode, topic, data)
        return self.decode(topic, data)

    def _plan(self, topic: TopicSpec[Any], schema_id: int) -> _WriterPlan:
        plan = self._plans.get((topic.name, schema_id))
        if plan is not None:
            return plan
        writer_schema = self.registry.schema_by_id(schema_id)
        reader_schema, reader_parsed = self.current_schema(topic)
        try:
            writer_parsed = parse_cached(writer_schema)
        except Exception as exc:
            plan = _WriterPlan(None, None, (f"writer schema is not valid Avro: {exc}",))
        else:
            if canonical_json(writer_schema) == canonical_json(reader_schema):
                plan = _WriterPlan(writer_parsed, None, ())
            else:
                problems = tuple(str(p) for p in check_backward(writer_schema, reader_schema, verify=False))
                plan = _WriterPlan(writer_parsed, reader_parsed, problems)
        with self._lock:
            self._plans[(topic.name, schema_id)] = plan
        return plan
