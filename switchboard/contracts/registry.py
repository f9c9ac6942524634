"""Schema ids: which id frames a record we write, which schema an id in a frame means.

Two implementations of one small protocol, chosen by ``KafkaSettings.schema_registry_url``:

- :class:`CatalogRegistry` reads ``schemas/catalog.json``: offline, no extra service, ids
  committed with the code. The default for development, tests and small deployments.
- :class:`ConfluentRegistryClient` talks to a Confluent-compatible registry over HTTP, for
  deployments where external consumers (analytics, billing) resolve ids themselves.

Do not mix them on one cluster: the ids of the catalog and of a registry are different
number spaces (see docs/contracts.md for how to seed a fresh registry with the catalog ids).
"""

from __future__ import annotations

import json
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import httpx

from switchboard.contracts.errors import ContractError, ContractErrorCode
from switchboard.contracts.schemas import (
    CATALOG_FILE,
    Schema,
    canonical_json,
    fingerprint,
    load_schema_file,
    schemas_dir,
)
from switchboard.settings import KafkaSettings

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


@runtime_checkable
class SchemaRegistry(Protocol):
    """Where schema ids come from. Implementations cache: both calls are on the hot path."""

    def id_for(self, subject: str, schema: Schema) -> int:
        """The id of exactly this schema under ``subject`` (registering it if allowed)."""
        ...

    def schema_by_id(self, schema_id: int) -> Schema:
        """The schema an id stands for; ``ContractError(unknown_schema_id)`` when none."""
        ...


# --------------------------------------------------------------------------- catalog


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One released version of one subject, as listed in ``catalog.json``."""

    subject: str
    version: int
    schema_id: int
    path: str
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "id": self.schema_id, "path": self.path, "sha256": self.sha256}


class CatalogRegistry:
    """Schema ids from the committed catalog; never touches the network.

    Every schema a service may write must be released in the catalog first (see
    ``python -m switchboard.contracts.release``): a schema edited but not released has no
    id, and encoding with it fails with ``unknown_schema`` rather than writing bytes no
    reader could resolve.
    """

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or schemas_dir()
        self._entries: dict[str, tuple[CatalogEntry, ...]] | None = None
        self._schemas: dict[int, Schema] = {}
        self._lock = threading.Lock()

    @property
    def catalog_path(self) -> Path:
        return self.directory / CATALOG_FILE

    def entries(self) -> dict[str, tuple[CatalogEntry, ...]]:
        """All released versions per subject, oldest first."""
        if self._entries is None:
            with self._lock:
                if self._entries is None:
                    self._entries = read_catalog(self.catalog_path)
        return self._entries

    def versions(self, subject: str) -> tuple[CatalogEntry, ...]:
        return self.entries().get(subject, ())

    def id_for(self, subject: str, schema: Schema) -> int:
        wanted = fingerprint(schema)
        for entry in self.versions(subject):
            if entry.sha256 == wanted:
                return entry.schema_id
        raise ContractError(
            ContractErrorCode.UNKNOWN_SCHEMA,
            f"the schema of subject {subject} is not released in {self.catalog_path}; "
            "run `python -m switchboard.contracts.release` after checking compatibility",
        )

    def schema_by_id(self, schema_id: int) -> Schema:
        cached = self._schemas.get(schema_id)
        if cached is not None:
            return cached
        for entries in self.entries().values():
            for entry in entries:
                if entry.schema_id == schema_id:
                    schema = load_schema_file(self.directory / entry.path)
                    self._schemas[schema_id] = schema
                    return schema
        raise ContractError(ContractErrorCode.UNKNOWN_SCHEMA_ID, f"schema id {schema_id} is not in {self.catalog_path}")


def read_catalog(path: Path) -> dict[str, tuple[CatalogEntry, ...]]:
    """Parse ``catalog.json``; a broken catalog is a deployment bug, so it fails loudly."""
    with path.open(encoding="utf-8") as handle:
        data = json.load(handle)
    entries: dict[str, tuple[CatalogEntry, ...]] = {}
    seen_ids: set[int] = set()
    for subject, versions in data["subjects"].items():
        parsed = tuple(
            CatalogEntry(
                subject=subject,
                version=int(v["version"]),
                schema_id=int(v["id"]),
                path=str(v["path"]),
                sha256=str(v["sha256"]),
            )
            for v in versions
        )
        for entry in parsed:
            if entry.schema_id in seen_ids:
                raise ValueError(f"{path}: schema id {entry.schema_id} is used twice")
            seen_ids.add(entry.schema_id)
        entries[subject] = tuple(sorted(parsed, key=lambda e: e.version))
    return entries


def write_catalog(path: Path, entries: dict[str, tuple[CatalogEntry, ...]]) -> None:
    """Write ``catalog.json`` in a stable, diff-friendly layout."""
    data = {
        "doc": (
            "Schema ids per subject, used when no schema registry is configured. Ids are "
            "global and never reused. Maintained by `python -m switchboard.contracts.release`; "
            "see docs/contracts.md."
        ),
        "subjects": {subject: [e.to_json() for e in versions] for subject, versions in entries.items()},
    }
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------- confluent


class ConfluentRegistryClient:
    """A Confluent-compatible schema registry client (Confluent, Apicurio, Redpanda, Karapace).

    Synchronous on purpose: Kafka (de)serializers are synchronous callables. Every answer is
    cached for the life of the process (ids are immutable), so the network is touched once
    per schema; call :meth:`preload` at startup to take even that off the hot path. Code on an
    event loop reads through ``Serde.decode_async``, which makes the first lookup of an id on a
    worker thread.

    With ``auto_register`` (the default) writing registers the schema (idempotent: the same
    schema gets the same id back). Without it, the schema must already be registered
    (e.g. by CI) and is only looked up, which is what production registries usually allow.
    """

    def __init__(
        self,
        url: str,
        *,
        client: httpx.Client | None = None,
        timeout_s: float = 5.0,
        auto_register: bool = True,
        auth: tuple[str, str] | None = None,
        cafile: Path | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.auto_register = auto_register
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(cafile)) if cafile else True
        self._client = client or httpx.Client(timeout=timeout_s, auth=auth, verify=verify)
        self._ids: dict[tuple[str, str], int] = {}
        self._schemas: dict[int, Schema] = {}

    def close(self) -> None:
        self._client.close()

    def id_for(self, subject: str, schema: Schema) -> int:
        text = canonical_json(schema)
        cached = self._ids.get((subject, text))
        if cached is not None:
            return cached
        path = f"/subjects/{subject}/versions" if self.auto_register else f"/subjects/{subject}"
        response = self._request("POST", path, body={"schema": text})
        if response.status_code == 404:
            raise ContractError(
                ContractErrorCode.UNKNOWN_SCHEMA, f"the schema is not registered under subject {subject}"
            )
        if response.status_code == 409:
            raise ContractError(
                ContractErrorCode.SCHEMA_MISMATCH,
                f"the registry refused the schema of {subject} as incompatible: {_error_message(response)}",
            )
        schema_id = int(self._json(response)["id"])
        self._ids[(subject, text)] = schema_id
        self._schemas.setdefault(schema_id, schema)
        return schema_id

    def schema_by_id(self, schema_id: int) -> Schema:
        cached = self._schemas.get(schema_id)
        if cached is not None:
            return cached
        response = self._request("GET", f"/schemas/ids/{schema_id}")
        if response.status_code == 404:
            raise ContractError(ContractErrorCode.UNKNOWN_SCHEMA_ID, f"schema id {schema_id} is not in the registry")
        body = self._json(response)
        schema_type = body.get("schemaType", "AVRO")
        if schema_type != "AVRO":
            raise ContractError(
                ContractErrorCode.SCHEMA_MISMATCH, f"schema id {schema_id} is a {schema_type} schema, not Avro"
            )
        schema = json.loads(body["schema"])
        if not isinstance(schema, dict):
            raise ContractError(
                ContractErrorCode.SCHEMA_MISMATCH, f"schema id {schema_id} is not an Avro record schema"
            )
        self._schemas[schema_id] = schema
        return schema

    def preload(self, subjects_and_schemas: list[tuple[str, Schema]]) -> None:
        """Resolve the ids of the schemas this process writes, before the first record."""
        for subject, schema in subjects_and_schemas:
            self.id_for(subject, schema)

    def _request(self, method: str, path: str, body: Any = None) -> httpx.Response:
        try:
            response = self._client.request(
                method, f"{self.url}{path}", json=body, headers={"Accept": _CONTENT_TYPE, "Content-Type": _CONTENT_TYPE}
            )
        except httpx.HTTPError as exc:
            raise ContractError(
                ContractErrorCode.REGISTRY_UNAVAILABLE, f"{method} {path}: {type(exc).__name__}: {exc}"
            ) from exc
        if response.status_code >= 500:
            raise ContractError(
                ContractErrorCode.REGISTRY_UNAVAILABLE,
                f"{method} {path}: HTTP {response.status_code} {_error_message(response)}",
            )
        if response.status_code == 429:
            raise ContractError(ContractErrorCode.REGISTRY_UNAVAILABLE, f"{method} {path}: HTTP 429 (rate limited)")
        if response.status_code in (401, 403):
            raise ContractError(
                ContractErrorCode.REGISTRY_UNAUTHORIZED,
                f"{method} {path}: HTTP {response.status_code}: the registry refused our credentials "
                "(KAFKA_SCHEMA_REGISTRY_USERNAME, KAFKA_SCHEMA_REGISTRY_PASSWORD)",
            )
        if response.status_code >= 400 and response.status_code not in (404, 409):
            raise ContractError(
                ContractErrorCode.REGISTRY_ERROR,
                f"{method} {path}: HTTP {response.status_code} {_error_message(response)}",
            )
        return response

    @staticmethod
    def _json(response: httpx.Response) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError as exc:
            raise ContractError(
                ContractErrorCode.REGISTRY_ERROR, f"the registry answered with invalid JSON: {exc}"
            ) from exc
        if not isinstance(body, dict):
            raise ContractError(ContractErrorCode.REGISTRY_ERROR, "the registry answered with an unexpected JSON shape")
        return body


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(body, dict):
        return str(body.get("message", body))[:200]
    return str(body)[:200]


def registry_from_settings(settings: KafkaSettings, *, directory: Path | None = None) -> SchemaRegistry:
    """The registry the settings ask for: HTTP when a URL is set, else the catalog."""
    if settings.schema_registry_url:
        return ConfluentRegistryClient(
            settings.schema_registry_url,
            auth=settings.schema_registry_auth(),
            cafile=settings.schema_registry_cafile,
        )
    return CatalogRegistry(directory)
