"""Schema ids: the committed catalog is consistent; the HTTP client speaks Confluent's API."""

from __future__ import annotations

import base64
import http.server
import json
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from pydantic import SecretStr, ValidationError

from switchboard.contracts import (
    CatalogRegistry,
    ConfluentRegistryClient,
    ContractError,
    ContractErrorCode,
    Serde,
    Topics,
    all_topics,
    registry_from_settings,
    topic_for_record,
)
from switchboard.contracts.schemas import canonical_json, fingerprint, load_schema_file
from switchboard.settings import KafkaSettings
from tests.support.samples import realistic_records

# --------------------------------------------------------------------------- catalog


def test_every_current_schema_is_released_in_the_catalog(catalog: CatalogRegistry) -> None:
    """Fails after an .avsc edit until it is released: run the release module (see docs)."""
    for topic in all_topics():
        try:
            catalog.id_for(topic.subject, topic.load_schema())
        except ContractError as exc:
            pytest.fail(f"{topic.name}: {exc.message}")


def test_catalog_entries_are_consistent(catalog: CatalogRegistry) -> None:
    subjects = {t.subject for t in all_topics()}
    ids: list[int] = []
    for subject, entries in catalog.entries().items():
        assert subject in subjects, f"catalog subject {subject} has no topic"
        assert [e.version for e in entries] == list(range(1, len(entries) + 1))
        for entry in entries:
            ids.append(entry.schema_id)
            path = catalog.directory / entry.path
            assert path.is_file(), f"{entry.path} is missing"
            assert entry.path == f"released/{subject.removesuffix('-value')}/v{entry.version}.avsc"
            assert fingerprint(load_schema_file(path)) == entry.sha256, (
                f"{entry.path} was edited after its release; released files are immutable"
            )
    assert len(ids) == len(set(ids)), "schema ids must be unique across subjects"
    assert all(i > 0 for i in ids)


def test_catalog_resolves_ids_both_ways(catalog: CatalogRegistry) -> None:
    for topic in all_topics():
        schema = topic.load_schema()
        assert catalog.schema_by_id(catalog.id_for(topic.subject, schema)) == schema


def test_catalog_unknown_lookups_have_codes(catalog: CatalogRegistry) -> None:
    with pytest.raises(ContractError) as caught:
        catalog.schema_by_id(424242)
    assert caught.value.code is ContractErrorCode.UNKNOWN_SCHEMA_ID
    schema = all_topics()[0].load_schema()
    edited = {**schema, "doc": "edited but not released"}
    with pytest.raises(ContractError) as caught:
        catalog.id_for(all_topics()[0].subject, edited)
    assert caught.value.code is ContractErrorCode.UNKNOWN_SCHEMA


def test_registry_is_chosen_by_settings() -> None:
    assert isinstance(registry_from_settings(KafkaSettings(schema_registry_url=None)), CatalogRegistry)
    client = registry_from_settings(KafkaSettings(schema_registry_url="http://registry:8081"))
    assert isinstance(client, ConfluentRegistryClient)
    client.close()


# --------------------------------------------------------------------------- confluent


class FakeRegistry:
    """An in-memory Confluent-compatible registry behind httpx.MockTransport."""

    def __init__(self) -> None:
        self.schemas: dict[int, str] = {}
        self.subjects: dict[str, dict[str, int]] = {}
        self.requests: list[httpx.Request] = []
        self.fail_with: int | None = None

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.fail_with is not None:
            return httpx.Response(self.fail_with, json={"error_code": self.fail_with, "message": "boom"})
        parts = request.url.path.strip("/").split("/")
        if request.method == "POST" and parts[0] == "subjects":
            assert request.headers["content-type"] == "application/vnd.schemaregistry.v1+json"
            text = json.loads(request.content)["schema"]
            known = self.subjects.setdefault(parts[1], {})
            if len(parts) == 3:  # register
                if text not in known:
                    schema_id = next((i for i, s in self.schemas.items() if s == text), len(self.schemas) + 100)
                    self.schemas[schema_id] = text
                    known[text] = schema_id
                return httpx.Response(200, json={"id": known[text]})
            if text not in known:  # lookup
                return httpx.Response(404, json={"error_code": 40403, "message": "not found"})
            return httpx.Response(200, json={"id": known[text], "subject": parts[1]})
        if request.method == "GET" and parts[:2] == ["schemas", "ids"]:
            schema_id = int(parts[2])
            if schema_id not in self.schemas:
                return httpx.Response(404, json={"error_code": 40403, "message": "not found"})
            return httpx.Response(200, json={"schema": self.schemas[schema_id]})
        return httpx.Response(405)


@pytest.fixture
def fake() -> FakeRegistry:
    return FakeRegistry()


@pytest.fixture
def make_client(fake: FakeRegistry) -> Callable[..., ConfluentRegistryClient]:
    def make(**kwargs: Any) -> ConfluentRegistryClient:
        http = httpx.Client(transport=httpx.MockTransport(fake.handler))
        return ConfluentRegistryClient("http://registry:8081/", client=http, **kwargs)

    return make


def test_confluent_registers_once_and_caches(
    fake: FakeRegistry, make_client: Callable[..., ConfluentRegistryClient]
) -> None:
    client = make_client()
    topic = all_topics()[0]
    schema = topic.load_schema()
    first = client.id_for(topic.subject, schema)
    assert client.id_for(topic.subject, schema) == first
    assert [(r.method, r.url.path) for r in fake.requests] == [("POST", f"/subjects/{topic.subject}/versions")]
    assert json.loads(fake.requests[0].content)["schema"] == canonical_json(schema)
    # A fresh process fetches the schema by id over HTTP, then caches it.
    other = make_client()
    assert other.schema_by_id(first) == schema
    assert other.schema_by_id(first) == schema
    assert [r.url.path for r in fake.requests[1:]] == [f"/schemas/ids/{first}"]


def test_confluent_lookup_only_mode(fake: FakeRegistry, make_client: Callable[..., ConfluentRegistryClient]) -> None:
    topic = all_topics()[1]
    client = make_client(auto_register=False)
    with pytest.raises(ContractError) as caught:
        client.id_for(topic.subject, topic.load_schema())
    assert caught.value.code is ContractErrorCode.UNKNOWN_SCHEMA
    assert fake.requests[-1].url.path == f"/subjects/{topic.subject}"
    registered = make_client().id_for(topic.subject, topic.load_schema())
    assert client.id_for(topic.subject, topic.load_schema()) == registered


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (500, ContractErrorCode.REGISTRY_UNAVAILABLE),
        (503, ContractErrorCode.REGISTRY_UNAVAILABLE),
        (409, ContractErrorCode.SCHEMA_MISMATCH),
        (422, ContractErrorCode.REGISTRY_ERROR),
        (401, ContractErrorCode.REGISTRY_UNAUTHORIZED),
        (403, ContractErrorCode.REGISTRY_UNAUTHORIZED),
        (429, ContractErrorCode.REGISTRY_UNAVAILABLE),
    ],
)
def test_confluent_http_errors_have_codes(
    fake: FakeRegistry, make_client: Callable[..., ConfluentRegistryClient], status: int, code: ContractErrorCode
) -> None:
    fake.fail_with = status
    topic = all_topics()[0]
    with pytest.raises(ContractError) as caught:
        make_client().id_for(topic.subject, topic.load_schema())
    assert caught.value.code is code
    waits = (ContractErrorCode.REGISTRY_UNAVAILABLE, ContractErrorCode.REGISTRY_UNAUTHORIZED)
    assert caught.value.retryable is (code in waits)


def test_confluent_unknown_id_and_unreachable_registry(make_client: Callable[..., ConfluentRegistryClient]) -> None:
    with pytest.raises(ContractError) as caught:
        make_client().schema_by_id(7)
    assert caught.value.code is ContractErrorCode.UNKNOWN_SCHEMA_ID

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    down = ConfluentRegistryClient("http://registry:8081", client=httpx.Client(transport=httpx.MockTransport(refuse)))
    with pytest.raises(ContractError) as caught:
        down.schema_by_id(7)
    assert caught.value.code is ContractErrorCode.REGISTRY_UNAVAILABLE
    assert caught.value.retryable


def test_serde_round_trips_through_the_confluent_registry(make_client: Callable[..., ConfluentRegistryClient]) -> None:
    producer, consumer = Serde(make_client()), Serde(make_client())
    for record in realistic_records():
        topic = topic_for_record(type(record))
        assert consumer.decode(topic, producer.encode(topic, record)) == record


# --------------------------------------------------------------------------- registry auth


class _AuthRegistry(http.server.BaseHTTPRequestHandler):
    """A registry that wants basic auth (Confluent Cloud: API key and secret)."""

    expected = "Basic " + base64.b64encode(b"SR-KEY:sr-secret").decode()
    seen: list[str | None] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.seen.append(self.headers.get("Authorization"))
        ok = self.headers.get("Authorization") == self.expected
        body = json.dumps({"id": 41} if ok else {"error_code": 40101, "message": "Unauthorized"}).encode()
        self.send_response(200 if ok else 401)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        del args


def test_the_registry_is_reached_with_the_configured_basic_auth_and_a_refusal_names_the_settings() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AuthRegistry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    schema = Topics.RUN_STARTED.load_schema()
    try:
        good = KafkaSettings(
            schema_registry_url=url, schema_registry_username="SR-KEY", schema_registry_password="sr-secret"
        )
        registry = registry_from_settings(good)
        assert registry.id_for("run_started-value", schema) == 41
        assert _AuthRegistry.seen[-1] == _AuthRegistry.expected

        wrong = good.model_copy(update={"schema_registry_password": SecretStr("stale-secret")})
        with pytest.raises(ContractError) as refused:
            registry_from_settings(wrong).id_for("run_started-value", schema)
        assert refused.value.code is ContractErrorCode.REGISTRY_UNAUTHORIZED
        assert refused.value.retryable, "a consumer waits for fixed credentials, it never dead-letters for them"
        assert "KAFKA_SCHEMA_REGISTRY_PASSWORD" in refused.value.message
        assert "stale-secret" not in refused.value.message
    finally:
        server.shutdown()


@pytest.mark.parametrize(
    "settings",
    [
        {"schema_registry_url": "https://key:secret@registry.example.com"},
        {"schema_registry_url": "https://registry.example.com", "schema_registry_username": "key"},
        {"schema_registry_url": "https://registry.example.com", "schema_registry_password": "secret"},
    ],
)
def test_registry_credentials_in_the_url_or_half_given_are_refused_at_start(settings: dict[str, str]) -> None:
    with pytest.raises(ValidationError) as refused:
        KafkaSettings(**settings)  # type: ignore[arg-type]
    assert "secret" not in str(refused.value).replace("KAFKA_SCHEMA_REGISTRY_PASSWORD", "")
