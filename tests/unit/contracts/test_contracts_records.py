"""The Python records and the .avsc schemas say the same thing, and the schemas say it well."""

from __future__ import annotations

import types
from datetime import date, datetime
from enum import StrEnum
from typing import Annotated, Any, Union, get_args, get_origin
from uuid import UUID

import pytest
from pydantic import AwareDatetime, BaseModel
from pydantic.fields import FieldInfo

from switchboard.contracts import Record, TopicSpec, all_topics
from switchboard.contracts.compatibility import check_backward

# Fields whose model has a producer-side default although the schema has none (a fresh id
# and the current time); everything else must agree on required-ness and defaults.
GENERATED_DEFAULTS = {"event_id", "occurred_at"}

TOPICS = all_topics()


def _strip_annotated(tp: Any) -> Any:
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return datetime if tp is AwareDatetime else tp


def _split_optional(tp: Any) -> tuple[Any, bool]:
    tp = _strip_annotated(tp)
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        nullable = len(args) != len(get_args(tp))
        assert len(args) == 1, f"only X | None unions are used, got {tp}"
        return _strip_annotated(args[0]), nullable
    return tp, False


def _named(schema: Any, names: dict[str, Any]) -> Any:
    """Resolve a by-name reference to a named type defined earlier in the same file."""
    if isinstance(schema, str) and schema in names:
        return names[schema]
    return schema


def _register(schema: Any, names: dict[str, Any]) -> None:
    if isinstance(schema, dict) and schema.get("type") in ("record", "enum"):
        names[schema["name"]] = schema


def _compare_type(avro: Any, py: Any, path: str, names: dict[str, Any]) -> None:
    avro = _named(avro, names)
    _register(avro, names)
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        assert "null" in avro and len(branches) == 1, f"{path}: unions are [null, X] only"
        _compare_type(branches[0], py, path, names)
        return
    kind = avro if isinstance(avro, str) else avro["type"]
    logical = avro.get("logicalType") if isinstance(avro, dict) else None
    expected: dict[tuple[str, str | None], type] = {
        ("string", "uuid"): UUID,
        ("string", None): str,
        ("boolean", None): bool,
        ("long", "timestamp-millis"): datetime,
        ("int", "date"): date,
        ("int", None): int,
        ("long", None): int,
        ("bytes", None): bytes,
        ("double", None): float,
    }
    if (kind, logical) in expected:
        assert py is expected[(kind, logical)], f"{path}: {kind}/{logical} but model has {py}"
    elif kind == "enum":
        assert isinstance(py, type) and issubclass(py, StrEnum), f"{path}: expected a StrEnum"
        assert [m.value for m in py] == avro["symbols"], f"{path}: enum symbols differ"
        assert py.__name__ == avro["name"], f"{path}: enum name differs"
    elif kind == "array":
        assert get_origin(py) is tuple, f"{path}: arrays are tuples, got {py}"
        item, ellipsis = get_args(py)
        assert ellipsis is Ellipsis, f"{path}: arrays are tuple[X, ...]"
        _compare_type(avro["items"], _strip_annotated(item), f"{path}[]", names)
    elif kind == "record":
        assert isinstance(py, type) and issubclass(py, BaseModel), f"{path}: expected a model"
        _compare_record(avro, py, path, names)
    else:
        pytest.fail(f"{path}: no mapping for Avro type {avro!r}")


def _compare_default(avro_field: dict[str, Any], info: FieldInfo, path: str) -> None:
    if "default" not in avro_field:
        if avro_field["name"] in GENERATED_DEFAULTS:
            assert info.default_factory is not None, f"{path}: expected a generated default"
        else:
            assert info.is_required(), f"{path}: schema has no default, model must require it"
        return
    assert not info.is_required(), f"{path}: schema has a default, model must have it too"
    default = info.get_default(call_default_factory=True)
    if isinstance(default, tuple):
        default = list(default)
    assert default == avro_field["default"], f"{path}: default {default!r} != schema's"


def _compare_record(schema: dict[str, Any], model: type[BaseModel], path: str, names: dict[str, Any]) -> None:
    assert model.__name__ == schema["name"], f"{path}: record name differs"
    avro_fields = [f["name"] for f in schema["fields"]]
    assert list(model.model_fields) == avro_fields, f"{path}: fields (or their order) differ"
    for avro_field in schema["fields"]:
        fpath = f"{path}.{avro_field['name']}"
        info = model.model_fields[avro_field["name"]]
        py, nullable = _split_optional(info.annotation)
        avro_type = _named(avro_field["type"], names)
        assert nullable == isinstance(avro_type, list), f"{fpath}: nullability differs"
        _compare_default(avro_field, info, fpath)
        _compare_type(avro_field["type"], py, fpath, names)


@pytest.mark.parametrize("topic", TOPICS, ids=lambda t: t.name)
def test_record_class_matches_its_schema(topic: TopicSpec[Record]) -> None:
    schema = topic.load_schema()
    _compare_record(schema, topic.record_type, schema["name"], {})


def _walk_docs(schema: Any, path: str, missing: list[str]) -> None:
    if isinstance(schema, list):
        for branch in schema:
            _walk_docs(branch, path, missing)
        return
    if not isinstance(schema, dict):
        return
    if schema.get("type") in ("record", "enum") and not schema.get("doc", "").strip():
        missing.append(f"{path} ({schema['type']} {schema['name']})")
    if schema.get("type") == "array":
        _walk_docs(schema["items"], f"{path}[]", missing)
    for field in schema.get("fields", []):
        if not field.get("doc", "").strip():
            missing.append(f"{path}.{field['name']}")
        _walk_docs(field["type"], f"{path}.{field['name']}", missing)


@pytest.mark.parametrize("topic", TOPICS, ids=lambda t: t.name)
def test_every_record_field_and_enum_has_a_doc(topic: TopicSpec[Record]) -> None:
    schema = topic.load_schema()
    missing: list[str] = []
    _walk_docs(schema, schema["name"], missing)
    assert not missing, f"undocumented: {missing}"


@pytest.mark.parametrize("topic", TOPICS, ids=lambda t: t.name)
def test_schema_conventions(topic: TopicSpec[Record]) -> None:
    """Namespace, envelope fields and valid defaults: what every consumer may rely on."""
    schema = topic.load_schema()
    assert schema["namespace"].startswith("dev.switchboard.events")
    fields = {f["name"]: f for f in schema["fields"]}
    assert fields["event_id"]["type"] == {"type": "string", "logicalType": "uuid"}
    assert fields["occurred_at"]["type"] == {"type": "long", "logicalType": "timestamp-millis"}
    assert "org_id" in fields
    if topic.scope.value == "conversation":
        assert fields["conversation_id"]["type"] == {"type": "string", "logicalType": "uuid"}
    # check_backward against itself also validates every default of the schema.
    assert check_backward(schema, schema, verify=False) == []


def test_timestamps_are_normalized_to_utc_milliseconds() -> None:
    from datetime import timedelta, timezone

    from switchboard.contracts import SteeringKind, SteeringMessage

    local = datetime(2025, 1, 1, 9, 0, 0, 123456, tzinfo=timezone(timedelta(hours=-3)))
    record = SteeringMessage(
        org_id=UUID(int=1),
        conversation_id=UUID(int=2),
        run_id=UUID(int=3),
        kind=SteeringKind.GUIDANCE,
        text="x",
        occurred_at=local,
    )
    assert record.occurred_at.utcoffset() == timedelta(0)
    assert record.occurred_at.hour == 12 and record.occurred_at.microsecond == 123000


def test_naive_timestamps_and_unknown_fields_are_refused() -> None:
    from pydantic import ValidationError

    from switchboard.contracts import SteeringKind, SteeringMessage

    base = {
        "org_id": UUID(int=1),
        "conversation_id": UUID(int=2),
        "run_id": UUID(int=3),
        "kind": SteeringKind.GUIDANCE,
        "text": "x",
    }
    with pytest.raises(ValidationError):
        SteeringMessage(**base, occurred_at=datetime(2025, 1, 1))
    with pytest.raises(ValidationError):
        SteeringMessage.model_validate({**base, "surprise": 1})


def test_records_are_immutable() -> None:
    from pydantic import ValidationError

    from switchboard.contracts import SteeringKind, SteeringMessage

    record = SteeringMessage(
        org_id=UUID(int=1), conversation_id=UUID(int=2), run_id=UUID(int=3), kind=SteeringKind.GUIDANCE, text="x"
    )
    with pytest.raises(ValidationError):
        record.text = "y"  # type: ignore[misc]
