"""Loading the ``.avsc`` files: where they live, how they are parsed, how two are compared.

The schema files are data shipped next to the code (``schemas/`` at the repository root);
``SWITCHBOARD_SCHEMAS_DIR`` points elsewhere when the code runs from an image or a wheel
that keeps them in another place.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from fastavro import parse_schema

from switchboard.settings import REPO_ROOT

# A schema in its JSON form (what an .avsc file or the registry holds).
Schema = dict[str, Any]
# A schema parsed by fastavro (opaque; only fastavro reads it).
ParsedSchema = Any

SCHEMAS_DIR_ENV = "SWITCHBOARD_SCHEMAS_DIR"
CATALOG_FILE = "catalog.json"
RELEASED_DIR = "released"


def schemas_dir() -> Path:
    """The directory with ``<topic>.avsc``, ``catalog.json`` and ``released/``."""
    override = os.environ.get(SCHEMAS_DIR_ENV)
    return Path(override) if override else REPO_ROOT / "schemas"


def load_schema_file(path: Path) -> Schema:
    """Read one ``.avsc`` file as JSON (no fastavro ``load_schema``: no file lookups by name)."""
    with path.open(encoding="utf-8") as handle:
        schema = json.load(handle)
    if not isinstance(schema, dict):
        raise ValueError(f"{path}: a topic schema must be a JSON object (a record)")
    return schema


def canonical_json(schema: Schema) -> str:
    """Compact JSON with sorted keys: equal schemas give equal strings whatever the layout.

    Unlike Avro's Parsing Canonical Form it keeps docs, defaults and logical types, because
    those are part of the contract (a changed default changes what readers see).
    """
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def fingerprint(schema: Schema) -> str:
    """SHA-256 of :func:`canonical_json`, as stored in the catalog."""
    return hashlib.sha256(canonical_json(schema).encode("utf-8")).hexdigest()


def parse(schema: Schema) -> ParsedSchema:
    """Parse with fastavro, each schema with its own table of named types.

    A fresh table matters: a writer schema and a reader schema both define
    ``dev.switchboard.events.RunCompleted`` and must not overwrite each other.
    """
    return parse_schema(schema, {})


@lru_cache(maxsize=256)
def _parse_cached(text: str) -> ParsedSchema:
    return parse(json.loads(text))


def parse_cached(schema: Schema) -> ParsedSchema:
    """:func:`parse`, cached by canonical JSON (parsing is the slow part of fastavro)."""
    return _parse_cached(canonical_json(schema))
