"""Records survive the wire; bad bytes fail with a stable code and nothing else."""

from __future__ import annotations

import contextlib
import io
import json
import random
import shutil
import struct
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from aiokafka.partitioner import murmur2
from fastavro import schemaless_writer

from switchboard.contracts import (
    CatalogRegistry,
    ContractError,
    ContractErrorCode,
    DeadLetter,
    Record,
    RunCompleted,
    Serde,
    Topics,
    TopicSpec,
    Vitality,
    all_topics,
    conversation_topics,
    decode_key,
    encode_key,
    frame,
    key_text,
    topic_for_record,
    unframe,
)
from switchboard.contracts.compatibility import sample_datum
from switchboard.contracts.release import release
from switchboard.contracts.schemas import fingerprint, parse, schemas_dir
from tests.support.samples import CONVERSATION, realistic_records

TOPICS = all_topics()


def _write(schema: dict[str, Any], datum: Any) -> bytes:
    buffer = io.BytesIO()
    schemaless_writer(buffer, parse(schema), datum)
    return buffer.getvalue()


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("record", realistic_records(), ids=lambda r: type(r).__name__)
def test_realistic_record_round_trips(serde: Serde, catalog: CatalogRegistry, record: Record) -> None:
    topic = topic_for_record(type(record))
    data = serde.encode(topic, record)
    assert data[0] == 0
    schema_id, _ = unframe(data)
    assert catalog.schema_by_id(schema_id) == topic.load_schema()
    assert serde.decode(topic, data) == record


@pytest.mark.parametrize("topic", TOPICS, ids=lambda t: t.name)
def test_generated_records_round_trip_through_every_union_branch(serde: Serde, topic: TopicSpec[Record]) -> None:
    """Records built from schema-driven samples: every optional payload set and unset."""
    schema = topic.load_schema()
    for variant in range(12):
        record = topic.record_type.model_validate(sample_datum(schema, variant))
        assert serde.decode(topic, serde.encode(topic, record)) == record


def test_schema_id_frames_the_catalog_id(serde: Serde, catalog: CatalogRegistry) -> None:
    for topic in TOPICS:
        data = serde.encode(topic, topic.record_type.model_validate(sample_datum(topic.load_schema(), 1)))
        schema_id = struct.unpack(">I", data[1:5])[0]
        assert schema_id == catalog.id_for(topic.subject, topic.load_schema())


def test_encoding_a_record_on_the_wrong_topic_is_refused(serde: Serde) -> None:
    record = realistic_records()[0]
    with pytest.raises(ContractError) as caught:
        serde.encode(Topics.RUN_COMPLETED, record)  # type: ignore[arg-type]
    assert caught.value.code is ContractErrorCode.INVALID_RECORD


# --------------------------------------------------------------------------- keys


def test_conversation_keys_are_the_utf8_conversation_id() -> None:
    for record in realistic_records():
        topic = topic_for_record(type(record))
        if topic in conversation_topics():
            assert encode_key(topic, record) == str(CONVERSATION).encode()
            assert key_text(topic, record) == str(CONVERSATION)


def test_one_conversation_lands_on_the_same_partition_of_every_conversation_topic() -> None:
    keys = {encode_key(t, r) for r in realistic_records() if (t := topic_for_record(type(r))) in conversation_topics()}
    assert len(keys) == 1
    key = keys.pop()
    assert key is not None
    partitions = {(murmur2(key) & 0x7FFFFFFF) % 12 for _ in conversation_topics()}
    assert len(partitions) == 1


def test_other_scopes_key_by_their_own_field() -> None:
    by_type = {type(r): r for r in realistic_records()}
    published = by_type[Topics.PUBLISHED.record_type]
    insight = by_type[Topics.INSIGHTS.record_type]
    assert encode_key(Topics.PUBLISHED, published) == str(published.agent_id).encode()
    assert encode_key(Topics.INSIGHTS, insight) == str(insight.org_id).encode()


def test_dead_letter_keeps_the_original_key_bytes() -> None:
    dead = next(r for r in realistic_records() if isinstance(r, DeadLetter))
    assert encode_key(Topics.DEAD_LETTER, dead) == b"\xffnot-utf8"
    keyless = dead.model_copy(update={"original_key": None})
    assert encode_key(Topics.DEAD_LETTER, keyless) is None
    assert decode_key(None) is None
    assert decode_key(b"\xffx") == "\ufffdx"


# --------------------------------------------------------------------------- errors


def _valid_bytes(serde: Serde) -> bytes:
    record = next(r for r in realistic_records() if isinstance(r, RunCompleted))
    return serde.encode(Topics.RUN_COMPLETED, record)


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (None, ContractErrorCode.TRUNCATED_FRAME),
        (b"", ContractErrorCode.TRUNCATED_FRAME),
        (b"\x00\x00\x01", ContractErrorCode.TRUNCATED_FRAME),
        (b"\x01\x00\x00\x00\x05body", ContractErrorCode.BAD_MAGIC_BYTE),
        (b'{"json": "not avro"}', ContractErrorCode.BAD_MAGIC_BYTE),
        (frame(999_999, b"\x00"), ContractErrorCode.UNKNOWN_SCHEMA_ID),
    ],
    ids=["none", "empty", "short", "magic-1", "json", "unknown-id"],
)
def test_decode_errors_have_stable_codes(serde: Serde, data: bytes | None, code: ContractErrorCode) -> None:
    with pytest.raises(ContractError) as caught:
        serde.decode(Topics.RUN_COMPLETED, data)
    assert caught.value.code is code
    assert not caught.value.retryable


def test_truncated_body_is_undecodable(serde: Serde) -> None:
    data = _valid_bytes(serde)
    with pytest.raises(ContractError) as caught:
        serde.decode(Topics.RUN_COMPLETED, data[: len(data) // 2])
    assert caught.value.code is ContractErrorCode.UNDECODABLE_BODY


def test_trailing_bytes_are_undecodable(serde: Serde) -> None:
    with pytest.raises(ContractError) as caught:
        serde.decode(Topics.RUN_COMPLETED, _valid_bytes(serde) + b"\x00\x00")
    assert caught.value.code is ContractErrorCode.UNDECODABLE_BODY


def test_a_record_of_another_topic_is_a_schema_mismatch(serde: Serde) -> None:
    record = next(r for r in realistic_records() if type(r) is Topics.RUN_STARTED.record_type)
    data = serde.encode(Topics.RUN_STARTED, record)
    with pytest.raises(ContractError) as caught:
        serde.decode(Topics.RUN_COMPLETED, data)
    assert caught.value.code is ContractErrorCode.SCHEMA_MISMATCH
    assert "record name changed from RunStarted to RunCompleted" in caught.value.message


def test_random_bytes_only_ever_raise_contract_errors(serde: Serde) -> None:
    rng = random.Random(20250314)
    valid = _valid_bytes(serde)
    samples: list[bytes] = []
    for _ in range(300):
        mutated = bytearray(valid)
        for _ in range(rng.randint(1, 8)):
            mutated[rng.randrange(5, len(mutated))] = rng.randrange(256)
        samples.append(bytes(mutated))
        samples.append(bytes(rng.randrange(256) for _ in range(rng.randint(0, 40))))
        samples.append(frame(5, bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))))
    for data in samples:
        # ContractError is the only acceptable failure; a decoded record is fine too.
        with contextlib.suppress(ContractError):
            serde.decode(Topics.RUN_COMPLETED, data)


# --------------------------------------------------------------------------- evolution


@pytest.mark.parametrize("topic", TOPICS, ids=lambda t: t.name)
def test_records_written_with_every_released_version_decode_with_the_current_reader(
    serde: Serde, catalog: CatalogRegistry, topic: TopicSpec[Record]
) -> None:
    for entry in catalog.versions(topic.subject):
        released = catalog.schema_by_id(entry.schema_id)
        for variant in range(8):
            data = frame(entry.schema_id, _write(released, sample_datum(released, variant)))
            record = serde.decode(topic, data)
            assert isinstance(record, topic.record_type)


@pytest.fixture
def evolved_schemas(tmp_path: Path) -> Path:
    """A schemas directory whose run_completed has an OLDER released v1 than the current.

    v1 lacks ``summary`` and ``tool_calls`` (added later with defaults) and has an extra
    enum symbol ``zombie`` in Vitality (which the current reader reads as its default).
    """
    directory = tmp_path / "schemas"
    shutil.copytree(schemas_dir(), directory)
    current = json.loads((directory / "run_completed.avsc").read_text())
    old = json.loads(json.dumps(current))
    old["fields"] = [f for f in old["fields"] if f["name"] not in ("summary", "tool_calls")]
    vitality = next(f for f in old["fields"] if f["name"] == "vitality")
    vitality["type"]["symbols"].append("zombie")
    (directory / "released" / "run_completed" / "v1.avsc").write_text(json.dumps(old))
    catalog = json.loads((directory / "catalog.json").read_text())
    catalog["subjects"]["run_completed-value"][0]["sha256"] = fingerprint(old)
    (directory / "catalog.json").write_text(json.dumps(catalog))
    plans = release([Topics.RUN_COMPLETED], directory)
    assert [p.next_version for p in plans] == [2] and not plans[0].blocked
    return directory


def test_old_writer_schema_resolves_against_the_current_reader(evolved_schemas: Path) -> None:
    catalog = CatalogRegistry(evolved_schemas)
    serde = Serde(catalog, schemas_directory=evolved_schemas)
    v1, v2 = catalog.versions(Topics.RUN_COMPLETED.subject)
    assert serde.schema_id(Topics.RUN_COMPLETED) == v2.schema_id  # we write the newest
    old_schema = catalog.schema_by_id(v1.schema_id)
    datum = sample_datum(old_schema, 3)
    datum["vitality"] = "zombie"
    record = serde.decode(Topics.RUN_COMPLETED, frame(v1.schema_id, _write(old_schema, datum)))
    assert isinstance(record, RunCompleted)
    assert record.summary is None and record.tool_calls == 0  # the reader's defaults
    assert record.vitality is Vitality.FAILED  # the enum default of the reader
    assert record.run_id == UUID(str(datum["run_id"]))
