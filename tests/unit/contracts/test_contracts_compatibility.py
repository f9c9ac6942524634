"""The backward-compatibility checker, and the rule that every schema passes it."""

from __future__ import annotations

from typing import Any

import pytest

from switchboard.contracts import (
    CatalogRegistry,
    Record,
    TopicSpec,
    all_topics,
    check_backward,
    check_backward_transitive,
    verify_by_samples,
)
from tests.support.samples import FIXTURES, load_json

# --------------------------------------------------------------------------- fixture pairs


def test_compatible_fixture_pair_passes() -> None:
    old, new = load_json(FIXTURES / "compatible_old.avsc"), load_json(FIXTURES / "compatible_new.avsc")
    assert check_backward(old, new) == []
    assert verify_by_samples(old, new) == []


def test_incompatible_fixture_pair_fails_with_every_reason() -> None:
    old = load_json(FIXTURES / "incompatible_old.avsc")
    new = load_json(FIXTURES / "incompatible_new.avsc")
    problems = check_backward(old, new)
    assert {p.path for p in problems} == {
        "Order.count",
        "Order.amount",
        "Order.state",
        "Order.kind",
        "Order.lines[].qty",
        "Order.tags{}",
        "Order.maybe<null>",
        "Order.created_at",
        "Order.channel",
        "Order.priority",
    }
    by_path = {p.path: p.message for p in problems}
    assert "added without a default" in by_path["Order.channel"]
    assert "int to string" in by_path["Order.count"]
    assert "['closed']" in by_path["Order.state"]
    # Independent proof: old records really do not decode with the new schema.
    assert verify_by_samples(old, new)


def test_schemas_may_be_given_as_json_text() -> None:
    old = (FIXTURES / "incompatible_old.avsc").read_text()
    new = (FIXTURES / "incompatible_new.avsc").read_text()
    assert check_backward(old, new)
    assert str(check_backward(old, new)[0]).startswith("Order.")


# --------------------------------------------------------------------------- rule by rule


def _record(*fields: dict[str, Any], name: str = "R", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "t", "fields": list(fields), **extra}


def _field(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


ENUM_AB = {"type": "enum", "name": "E", "symbols": ["a", "b"]}
ENUM_A = {"type": "enum", "name": "E", "symbols": ["a"]}
ENUM_A_DEFAULT = {"type": "enum", "name": "E", "symbols": ["a"], "default": "a"}
LINKED = {
    "type": "record",
    "name": "Node",
    "namespace": "t",
    "fields": [{"name": "value", "type": "int"}, {"name": "next", "type": ["null", "Node"], "default": None}],
}
LINKED_LONG = {
    "type": "record",
    "name": "Node",
    "namespace": "t",
    "fields": [{"name": "value", "type": "long"}, {"name": "next", "type": ["null", "Node"], "default": None}],
}
LINKED_BAD = {
    "type": "record",
    "name": "Node",
    "namespace": "t",
    "fields": [
        {"name": "value", "type": "int"},
        {"name": "label", "type": "string"},
        {"name": "next", "type": ["null", "Node"], "default": None},
    ],
}

COMPATIBLE = {
    "field removed": (_record(_field("a", "int"), _field("b", "string")), _record(_field("a", "int"))),
    "field added with default": (
        _record(_field("a", "int")),
        _record(_field("a", "int"), _field("b", "string", default="x")),
    ),
    "nullable field added": (
        _record(_field("a", "int")),
        _record(_field("a", "int"), _field("b", ["null", "long"], default=None)),
    ),
    "int to long": (_record(_field("a", "int")), _record(_field("a", "long"))),
    "int to double": (_record(_field("a", "int")), _record(_field("a", "double"))),
    "long to float": (_record(_field("a", "long")), _record(_field("a", "float"))),
    "float to double": (_record(_field("a", "float")), _record(_field("a", "double"))),
    "string to bytes": (_record(_field("a", "string")), _record(_field("a", "bytes"))),
    "bytes to string": (_record(_field("a", "bytes")), _record(_field("a", "string"))),
    "enum symbol added": (_record(_field("e", ENUM_A)), _record(_field("e", ENUM_AB))),
    "enum symbol removed with default": (_record(_field("e", ENUM_AB)), _record(_field("e", ENUM_A_DEFAULT))),
    "value to union": (_record(_field("a", "int")), _record(_field("a", ["null", "int"]))),
    "union widened": (_record(_field("a", ["null", "int"])), _record(_field("a", ["null", "int", "string"]))),
    "union branch promoted": (_record(_field("a", ["null", "int"])), _record(_field("a", ["null", "long"]))),
    "array items promoted": (
        _record(_field("a", {"type": "array", "items": "int"})),
        _record(_field("a", {"type": "array", "items": "double"})),
    ),
    "map values promoted": (
        _record(_field("a", {"type": "map", "values": "float"})),
        _record(_field("a", {"type": "map", "values": "double"})),
    ),
    "field renamed with alias": (_record(_field("a", "int")), _record(_field("b", "int", aliases=["a"]))),
    "record renamed with alias": (_record(_field("a", "int")), _record(_field("a", "int"), name="S", aliases=["R"])),
    "recursive type promoted": (LINKED, LINKED_LONG),
    "uuid logical type dropped": (
        _record(_field("a", {"type": "string", "logicalType": "uuid"})),
        _record(_field("a", "string")),
    ),
}

INCOMPATIBLE = {
    "field added without default": (_record(_field("a", "int")), _record(_field("a", "int"), _field("b", "string"))),
    "long to int": (_record(_field("a", "long")), _record(_field("a", "int"))),
    "double to float": (_record(_field("a", "double")), _record(_field("a", "float"))),
    "int to string": (_record(_field("a", "int")), _record(_field("a", "string"))),
    "string to int": (_record(_field("a", "string")), _record(_field("a", "int"))),
    "enum symbol removed": (_record(_field("e", ENUM_AB)), _record(_field("e", ENUM_A))),
    "union narrowed": (_record(_field("a", ["null", "int"])), _record(_field("a", "int"))),
    "union lost a branch": (_record(_field("a", ["null", "int", "string"])), _record(_field("a", ["null", "int"]))),
    "record to map": (
        _record(_field("a", _record(_field("x", "int"), name="In"))),
        _record(_field("a", {"type": "map", "values": "int"})),
    ),
    "array items changed": (
        _record(_field("a", {"type": "array", "items": "long"})),
        _record(_field("a", {"type": "array", "items": "int"})),
    ),
    "map values changed": (
        _record(_field("a", {"type": "map", "values": "string"})),
        _record(_field("a", {"type": "map", "values": "boolean"})),
    ),
    "nested field added without default": (
        _record(_field("a", _record(_field("x", "int"), name="In"))),
        _record(_field("a", _record(_field("x", "int"), _field("y", "int"), name="In"))),
    ),
    "record renamed": (_record(_field("a", "int")), _record(_field("a", "int"), name="S")),
    "enum renamed": (_record(_field("e", ENUM_AB)), _record(_field("e", {**ENUM_AB, "name": "F"}))),
    "fixed resized": (
        _record(_field("f", {"type": "fixed", "name": "F", "size": 4})),
        _record(_field("f", {"type": "fixed", "name": "F", "size": 8})),
    ),
    "recursive type gained a required field": (LINKED, LINKED_BAD),
}


@pytest.mark.parametrize("case", COMPATIBLE, ids=str)
def test_compatible_change(case: str) -> None:
    old, new = COMPATIBLE[case]
    assert check_backward(old, new) == []
    assert verify_by_samples(old, new) == []


@pytest.mark.parametrize("case", INCOMPATIBLE, ids=str)
def test_incompatible_change(case: str) -> None:
    old, new = INCOMPATIBLE[case]
    problems = check_backward(old, new)
    assert problems, f"{case} must be reported"
    # The rules and fastavro agree: some old sample really fails to decode.
    assert verify_by_samples(old, new), f"fastavro should also fail to read {case}"


def test_invalid_defaults_are_reported() -> None:
    old = _record(_field("a", "int"))
    new = _record(_field("a", "int"), _field("b", ["null", "string"], default="x"))
    [problem] = check_backward(old, new)
    assert problem.path == "R.b" and "first branch" in problem.message


def test_invalid_schema_is_reported_not_raised() -> None:
    [problem] = check_backward(_record(_field("a", "int")), {"type": "record", "name": "R"})
    assert problem.path == "<schema>" and "malformed" in problem.message
    [problem] = check_backward(_record(_field("a", "int")), {"type": "recrod", "name": "R"})
    assert problem.path == "<new schema>" and "not a valid Avro schema" in problem.message


# --------------------------------------------------------------------------- our schemas


@pytest.mark.parametrize("topic", all_topics(), ids=lambda t: t.name)
def test_current_schema_is_backward_compatible_with_every_released_version(
    catalog: CatalogRegistry, topic: TopicSpec[Record]
) -> None:
    entries = catalog.versions(topic.subject)
    assert entries, f"{topic.name} has no released version"
    released = [catalog.schema_by_id(e.schema_id) for e in entries]
    problems = check_backward_transitive(released, topic.load_schema(), labels=[f"v{e.version}" for e in entries])
    assert problems == [], "\n".join(str(p) for p in problems)
