"""Backward-compatibility check: can readers with the NEW schema read data written with the OLD?

This is the rule the topics promise external consumers (analytics, billing): a consumer
upgraded to the new schema still reads every record already on the topic and every record
from producers not yet upgraded. Consumers upgrade first, producers second.

Two independent checks, both run by :func:`check_backward`:

1. A structural checker that implements the resolution rules of the Avro specification
   ("Schema Resolution"): fields added without a default, removed fields (fine), type
   changes outside the allowed promotions (int -> long/float/double, long -> float/double,
   float -> double, string <-> bytes), enum symbols removed without an enum default, unions
   (every writer branch must be readable; a reader union must have a matching branch),
   named types (records, enums, fixed must keep their name or list it as an alias),
   arrays, maps and recursive types. It explains *why*, with a path to the field.
2. A proof by example: deterministic sample records are written with the old schema and
   read back with the new one through fastavro, the library the services use. It catches
   whatever the rules above could miss, and a disagreement between the two is itself
   reported, so a bug in the checker cannot silently pass an incompatible schema.

Logical types are ignored for resolution, as the specification says (a reader sees the
underlying type). Defaults of the new schema are also validated (a union's default must
match its first branch), because an invalid default breaks readers in other languages.
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from fastavro import schemaless_reader, schemaless_writer

from switchboard.contracts.schemas import parse

__all__ = [
    "Incompatibility",
    "check_backward",
    "check_backward_transitive",
    "sample_datum",
    "verify_by_samples",
]

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "error", "enum", "fixed"})
# (writer type, reader type) pairs the reader may promote.
PROMOTIONS = frozenset(
    {
        ("int", "long"),
        ("int", "float"),
        ("int", "double"),
        ("long", "float"),
        ("long", "double"),
        ("float", "double"),
        ("string", "bytes"),
        ("bytes", "string"),
    }
)

SchemaJson = dict[str, Any] | list[Any] | str


@dataclass(frozen=True, slots=True)
class Incompatibility:
    """One reason the new schema cannot read old data; ``path`` points at the field."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


# --------------------------------------------------------------------------- schema model


@dataclass(slots=True)
class _Names:
    """Named types of one schema, by full name, with the namespace their children inherit."""

    types: dict[str, tuple[dict[str, Any], str]] = field(default_factory=dict)


def _fullname(name: str, namespace: str) -> str:
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


def _namespace_of(fullname: str) -> str:
    return fullname.rpartition(".")[0]


def _short(name: str) -> str:
    return name.rpartition(".")[2]


def _collect(node: SchemaJson, namespace: str, names: _Names) -> None:
    if isinstance(node, list):
        for branch in node:
            _collect(branch, namespace, names)
        return
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    if kind in NAMED:
        full = _fullname(node["name"], node.get("namespace", namespace))
        child_ns = _namespace_of(full)
        names.types[full] = (node, child_ns)
        if kind in ("record", "error"):
            for fld in node.get("fields", []):
                _collect(fld["type"], child_ns, names)
    elif kind == "array":
        _collect(node["items"], namespace, names)
    elif kind == "map":
        _collect(node["values"], namespace, names)
    elif isinstance(kind, (dict, list)):
        _collect(kind, namespace, names)


@dataclass(frozen=True, slots=True)
class _Node:
    """A schema node with references resolved: its kind, its JSON and its namespace."""

    kind: str  # a primitive name, or record / enum / fixed / array / map / union
    schema: Any
    namespace: str
    fullname: str = ""

    @property
    def label(self) -> str:
        if self.kind in ("record", "enum", "fixed"):
            return f"{self.kind} {_short(self.fullname)}"
        if self.kind == "array":
            return "array"
        if self.kind == "map":
            return "map"
        if self.kind == "union":
            return "union"
        return self.kind


def _resolve(node: SchemaJson, namespace: str, names: _Names) -> _Node:
    if isinstance(node, list):
        return _Node("union", node, namespace)
    if isinstance(node, str):
        if node in PRIMITIVES:
            return _Node(node, node, namespace)
        full = _fullname(node, namespace)
        if full not in names.types:
            full = node  # a name in the null namespace, referenced from inside one
        if full not in names.types:
            raise ValueError(f"unknown type name {node!r}")
        schema, child_ns = names.types[full]
        kind = "record" if schema["type"] == "error" else schema["type"]
        return _Node(kind, schema, child_ns, full)
    kind = node.get("type")
    if isinstance(kind, (dict, list)):
        return _resolve(kind, namespace, names)
    if kind in PRIMITIVES:
        return _Node(kind, node, namespace)
    if kind in NAMED:
        full = _fullname(node["name"], node.get("namespace", namespace))
        return _Node("record" if kind == "error" else kind, node, _namespace_of(full), full)
    if kind in ("array", "map"):
        return _Node(kind, node, namespace)
    if isinstance(kind, str):
        return _resolve(kind, namespace, names)
    raise ValueError(f"not a schema: {node!r}")


def _aliases(node: _Node) -> set[str]:
    """Short names a reader's named type answers to: its own and its aliases."""
    return {_short(node.fullname)} | {_short(a) for a in node.schema.get("aliases", [])}


# --------------------------------------------------------------------------- structural check


class _Checker:
    def __init__(self, writer_names: _Names, reader_names: _Names) -> None:
        self.wnames = writer_names
        self.rnames = reader_names
        self.problems: list[Incompatibility] = []
        self._visiting: set[tuple[str, str]] = set()

    def fail(self, path: str, message: str) -> None:
        self.problems.append(Incompatibility(path, message))

    def matches(self, w: _Node, r: _Node) -> bool:
        """Shallow match used to pick a reader union branch (Avro: "first that matches")."""
        if w.kind in PRIMITIVES and r.kind in PRIMITIVES:
            return w.kind == r.kind or (w.kind, r.kind) in PROMOTIONS
        if w.kind != r.kind:
            return False
        if w.kind in ("record", "enum", "fixed"):
            return _short(w.fullname) in _aliases(r)
        return True  # array / map: the deep check follows

    def check(self, w: _Node, r: _Node, path: str) -> None:
        if w.kind == "union":
            for branch in w.schema:
                wb = _resolve(branch, w.namespace, self.wnames)
                if r.kind != "union" and not self.matches(wb, r):
                    self.fail(
                        f"{path}<{wb.label}>", f"the old union branch {wb.label} cannot be read as the new {r.label}"
                    )
                    continue
                self.check(wb, r, f"{path}<{wb.label}>")
            return
        if r.kind == "union":
            branches = [_resolve(b, r.namespace, self.rnames) for b in r.schema]
            chosen = next((b for b in branches if self.matches(w, b)), None)
            if chosen is None:
                self.fail(
                    path,
                    f"the new union [{', '.join(b.label for b in branches)}] has no "
                    f"branch that can read the old {w.label}",
                )
                return
            self.check(w, chosen, path)
            return
        if w.kind in PRIMITIVES and r.kind in PRIMITIVES:
            if w.kind != r.kind and (w.kind, r.kind) not in PROMOTIONS:
                self.fail(path, f"type changed from {w.kind} to {r.kind}, which is not an allowed promotion")
            return
        if w.kind != r.kind:
            self.fail(path, f"type changed from {w.label} to {r.label}")
            return
        if w.kind in ("record", "enum", "fixed") and _short(w.fullname) not in _aliases(r):
            self.fail(path, f"{w.kind} name changed from {_short(w.fullname)} to {_short(r.fullname)} without an alias")
            return
        if w.kind == "record":
            self.check_record(w, r, path)
        elif w.kind == "enum":
            missing = [s for s in w.schema["symbols"] if s not in r.schema["symbols"]]
            if missing and "default" not in r.schema:
                self.fail(path, f"enum symbols {missing} were removed and the new enum has no default to read them as")
        elif w.kind == "fixed":
            if w.schema["size"] != r.schema["size"]:
                self.fail(path, f"fixed size changed from {w.schema['size']} to {r.schema['size']}")
        elif w.kind == "array":
            self.check(
                _resolve(w.schema["items"], w.namespace, self.wnames),
                _resolve(r.schema["items"], r.namespace, self.rnames),
                f"{path}[]",
            )
        elif w.kind == "map":
            self.check(
                _resolve(w.schema["values"], w.namespace, self.wnames),
                _resolve(r.schema["values"], r.namespace, self.rnames),
                f"{path}{{}}",
            )

    def check_record(self, w: _Node, r: _Node, path: str) -> None:
        key = (w.fullname, r.fullname)
        if key in self._visiting:  # a recursive type already being checked
            return
        self._visiting.add(key)
        try:
            writer_fields = {f["name"]: f for f in w.schema["fields"]}
            for rf in r.schema["fields"]:
                fpath = f"{path}.{rf['name']}"
                candidates = [rf["name"], *rf.get("aliases", [])]
                wf = next((writer_fields[n] for n in candidates if n in writer_fields), None)
                if wf is None:
                    if "default" not in rf:
                        self.fail(
                            fpath,
                            "field added without a default: records written with the old schema have no value for it",
                        )
                    continue
                self.check(
                    _resolve(wf["type"], w.namespace, self.wnames),
                    _resolve(rf["type"], r.namespace, self.rnames),
                    fpath,
                )
        finally:
            self._visiting.discard(key)


# --------------------------------------------------------------------------- defaults


def _default_problems(schema: SchemaJson, names: _Names) -> list[Incompatibility]:
    """Every field default in ``schema`` must be valid for its type (first union branch)."""
    problems: list[Incompatibility] = []
    done: set[str] = set()

    def visit(node: _Node, path: str) -> None:
        if node.kind == "union":
            for b in node.schema:
                visit(_resolve(b, node.namespace, names), path)
        elif node.kind == "array":
            visit(_resolve(node.schema["items"], node.namespace, names), f"{path}[]")
        elif node.kind == "map":
            visit(_resolve(node.schema["values"], node.namespace, names), f"{path}{{}}")
        elif node.kind == "enum":
            default = node.schema.get("default")
            if default is not None and default not in node.schema["symbols"]:
                problems.append(Incompatibility(path, f"enum default {default!r} is not one of its symbols"))
        elif node.kind == "record" and node.fullname not in done:
            done.add(node.fullname)
            for fld in node.schema["fields"]:
                fpath = f"{path}.{fld['name']}"
                ftype = _resolve(fld["type"], node.namespace, names)
                if "default" in fld and not _valid_default(fld["default"], ftype, names):
                    target = ftype
                    if ftype.kind == "union":
                        target = _resolve(ftype.schema[0], ftype.namespace, names)
                    problems.append(
                        Incompatibility(
                            fpath,
                            f"default {fld['default']!r} is not a valid {target.label} "
                            "(a union's default must match its first branch)",
                        )
                    )
                visit(ftype, fpath)

    root = _resolve(schema, "", names)
    visit(root, _short(root.fullname) if root.fullname else "<root>")
    return problems


def _valid_default(value: Any, node: _Node, names: _Names) -> bool:
    kind = node.kind
    if kind == "union":
        return _valid_default(value, _resolve(node.schema[0], node.namespace, names), names)
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind in ("int", "long"):
        bits = 31 if kind == "int" else 63
        return isinstance(value, int) and not isinstance(value, bool) and -(2**bits) <= value < 2**bits
    if kind in ("float", "double"):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind in ("string", "bytes", "fixed"):
        return isinstance(value, str)
    if kind == "enum":
        return isinstance(value, str) and value in node.schema["symbols"]
    if kind == "array":
        items = _resolve(node.schema["items"], node.namespace, names)
        return isinstance(value, list) and all(_valid_default(v, items, names) for v in value)
    if kind == "map":
        values = _resolve(node.schema["values"], node.namespace, names)
        return isinstance(value, dict) and all(_valid_default(v, values, names) for v in value.values())
    if kind == "record":
        if not isinstance(value, dict):
            return False
        for fld in node.schema["fields"]:
            ftype = _resolve(fld["type"], node.namespace, names)
            if fld["name"] in value:
                if not _valid_default(value[fld["name"]], ftype, names):
                    return False
            elif "default" not in fld:
                return False
        return True
    return False


# --------------------------------------------------------------------------- samples


def sample_datum(schema: SchemaJson, variant: int = 0) -> Any:
    """A deterministic datum valid for ``schema``; different variants take different branches.

    Logical types get real values (a uuid, an aware datetime...), because fastavro converts
    them on read and a random string would not survive as a uuid.
    """
    names = _Names()
    _collect(schema, "", names)
    return _sample(_resolve(schema, "", names), names, variant, 0)


def _sample(node: _Node, names: _Names, variant: int, depth: int) -> Any:
    kind = node.kind
    logical = node.schema.get("logicalType") if isinstance(node.schema, dict) else None
    if kind == "union":
        branches = [_resolve(b, node.namespace, names) for b in node.schema]
        if depth > 6 and any(b.kind == "null" for b in branches):
            return None
        return _sample(branches[variant % len(branches)], names, variant // len(branches) + 1, depth + 1)
    if kind == "null":
        return None
    if kind == "boolean":
        return variant % 2 == 0
    if kind == "int":
        if logical == "date":
            return date(2024, 1, 1) + timedelta(days=variant)
        if logical == "time-millis":
            return time(12, variant % 60, 0, 123000)
        return variant * 7 - 3
    if kind == "long":
        if logical in ("timestamp-millis", "timestamp-micros"):
            return datetime(2024, 1, 1, 12, 0, 0, 123000, tzinfo=UTC) + timedelta(hours=variant)
        if logical in ("local-timestamp-millis", "local-timestamp-micros"):
            return datetime(2024, 1, 1, 12, 0, 0, 123000) + timedelta(hours=variant)
        if logical == "time-micros":
            return time(12, variant % 60, 0, 123456)
        return variant * 1_000_003 - 5
    if kind in ("float", "double"):
        return variant + 0.5
    if kind == "string":
        if logical == "uuid":
            return uuid.UUID(int=variant + 1)
        return f"sample-{variant}"
    if kind == "bytes":
        if logical == "decimal":
            return Decimal(variant).scaleb(-int(node.schema.get("scale", 0)))
        return bytes([variant % 256]) * (variant % 4)
    if kind == "fixed":
        if logical == "decimal":
            return Decimal(variant).scaleb(-int(node.schema.get("scale", 0)))
        return bytes([variant % 256]) * int(node.schema["size"])
    if kind == "enum":
        symbols = node.schema["symbols"]
        return symbols[variant % len(symbols)]
    if kind == "array":
        items = _resolve(node.schema["items"], node.namespace, names)
        count = 0 if depth > 6 else variant % 3
        return [_sample(items, names, variant + i, depth + 1) for i in range(count)]
    if kind == "map":
        values = _resolve(node.schema["values"], node.namespace, names)
        count = 0 if depth > 6 else variant % 3
        return {f"k{i}": _sample(values, names, variant + i, depth + 1) for i in range(count)}
    if kind == "record":
        return {
            fld["name"]: _sample(_resolve(fld["type"], node.namespace, names), names, variant + i, depth + 1)
            for i, fld in enumerate(node.schema["fields"])
        }
    raise ValueError(f"cannot build a sample for {node.label}")


def _variant_count(schema: SchemaJson) -> int:
    """Enough variants to visit every union branch and enum symbol at least once."""
    widest = 2

    def walk(node: Any) -> None:
        nonlocal widest
        if isinstance(node, list):
            widest = max(widest, len(node))
            for b in node:
                walk(b)
        elif isinstance(node, dict):
            if "symbols" in node:
                widest = max(widest, len(node["symbols"]))
            for key in ("type", "items", "values"):
                if isinstance(node.get(key), (dict, list)):
                    walk(node[key])
            for fld in node.get("fields", []):
                walk(fld["type"])

    walk(schema)
    return widest * 3


def verify_by_samples(old: SchemaJson, new: SchemaJson, *, count: int | None = None) -> list[Incompatibility]:
    """Write sample records with ``old`` and read them with ``new`` through fastavro."""
    old_parsed, new_parsed = parse(old), parse(new)  # type: ignore[arg-type]
    problems: list[Incompatibility] = []
    for variant in range(count if count is not None else _variant_count(old)):
        datum = sample_datum(old, variant)
        buffer = io.BytesIO()
        try:
            schemaless_writer(buffer, old_parsed, datum)
        except Exception as exc:
            problems.append(
                Incompatibility("<sample>", f"sample {variant} could not be written with the old schema: {exc}")
            )
            continue
        buffer.seek(0)
        try:
            schemaless_reader(buffer, old_parsed, new_parsed)
        except Exception as exc:
            problems.append(
                Incompatibility(
                    "<sample>",
                    f"sample {variant} written with the old schema does not decode with "
                    f"the new one: {type(exc).__name__}: {exc}",
                )
            )
    return problems


# --------------------------------------------------------------------------- entry points


def _load(schema: SchemaJson) -> SchemaJson:
    if isinstance(schema, str) and schema.lstrip().startswith(("{", "[", '"')):
        loaded: SchemaJson = json.loads(schema)
        return loaded
    return schema


def check_backward(old: SchemaJson, new: SchemaJson, *, verify: bool = True) -> list[Incompatibility]:
    """Reasons readers with ``new`` cannot read data written with ``old``; empty when they can.

    Accepts schemas as JSON objects or JSON text. With ``verify`` (the default) a schema the
    rules accept is also proven by decoding old samples with the new schema.
    """
    old, new = _load(old), _load(new)
    for label, schema in (("old", old), ("new", new)):
        try:
            parse(schema)  # type: ignore[arg-type]
        except Exception as exc:
            return [Incompatibility(f"<{label} schema>", f"not a valid Avro schema: {exc}")]
    wnames, rnames = _Names(), _Names()
    try:
        _collect(old, "", wnames)
        _collect(new, "", rnames)
        root = _resolve(new, "", rnames)
        checker = _Checker(wnames, rnames)
        checker.check(_resolve(old, "", wnames), root, _short(root.fullname) if root.fullname else "<root>")
        problems = checker.problems + _default_problems(new, rnames)
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        # fastavro accepts some malformed schemas (a record without "fields"...).
        return [Incompatibility("<schema>", f"malformed schema: {type(exc).__name__}: {exc}")]
    if not problems and verify:
        problems = [
            Incompatibility(p.path, f"{p.message} (the structural check missed this)")
            for p in verify_by_samples(old, new)
        ]
    return problems


def check_backward_transitive(
    released: Iterable[SchemaJson], new: SchemaJson, *, labels: Sequence[str] | None = None
) -> list[Incompatibility]:
    """:func:`check_backward` against every released version (topics keep old records)."""
    problems: list[Incompatibility] = []
    for index, old in enumerate(released):
        label = labels[index] if labels is not None else f"v{index + 1}"
        problems.extend(Incompatibility(f"{label} -> new: {p.path}", p.message) for p in check_backward(old, new))
    return problems
