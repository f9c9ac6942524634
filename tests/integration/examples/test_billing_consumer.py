"""The example billing consumer, against the real ``run_completed`` topic.

Records are produced the way the runner produces them (switchboard's ``RecordProducer`` and
``Serde``), under this test's topic prefix; the example reads them with nothing but the
files in ``schemas/``. Its totals must equal the sum of the distinct runs, a redelivered run
counted once, a dry run billed and shown apart.
"""

from __future__ import annotations

import ast
import asyncio
import copy
import io
import json
import shutil
import sys
import uuid
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import fastavro
import pytest

from examples import billing_consumer
from switchboard.contracts import ErrorFamily, RunCompleted, RunStatus, Topics, Vitality, WakeReason, encode_key
from switchboard.contracts.schemas import schemas_dir
from switchboard.contracts.serde import frame
from switchboard.kafka.producer import RecordProducer
from switchboard.settings import KafkaSettings

pytestmark = pytest.mark.integration

EXAMPLES = Path(billing_consumer.__file__).resolve().parent
ORG_A, ORG_B = uuid.uuid4(), uuid.uuid4()
NOVEMBER = datetime(2026, 11, 30, 23, 59, 59, 999000, tzinfo=UTC)
DECEMBER = datetime(2026, 12, 1, 0, 0, 0, 1000, tzinfo=UTC)


def _run(
    org: uuid.UUID, completed_at: datetime, *, cost: int, tokens: tuple[int, int], dry_run: bool = False
) -> RunCompleted:
    return RunCompleted(
        org_id=org,
        conversation_id=uuid.uuid4(),
        contact_id=uuid.uuid4(),
        channel_session_id=uuid.uuid4(),
        run_id=uuid.uuid4(),
        agent_id=uuid.uuid4(),
        version_id=uuid.uuid4(),
        wake_reason=WakeReason.USER_MESSAGE,
        status=RunStatus.COMPLETED,
        vitality=Vitality.PRODUCTIVE,
        final_text="Olá! Abrimos às 9h.",
        provider="anthropic",
        model="claude-haiku-4-5",
        tokens_in=tokens[0],
        tokens_out=tokens[1],
        cache_read_tokens=7,
        cost_micro_usd=cost,
        latency_ms=840,
        steps=2,
        dry_run=dry_run,
        started_at=completed_at,
        completed_at=completed_at,
    )


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_examples_import_nothing_of_switchboard() -> None:
    """An external team has only the schemas: any import of our code would hide a contract gap."""
    files = sorted(EXAMPLES.glob("*.py"))
    assert EXAMPLES / "billing_consumer.py" in files
    for path in files:
        ours = {name for name in _imported_modules(path) if name.split(".")[0] in {"switchboard", "services", "tests"}}
        assert not ours, f"{path.name} imports {ours}"


def _lost_closure(run: RunCompleted, completed_at: datetime) -> RunCompleted:
    """What the dispatcher emits for a run whose runner went silent: same run, no usage."""
    return run.model_copy(
        update={
            "event_id": uuid.uuid4(),
            "status": RunStatus.FAILED,
            "vitality": Vitality.DEAD,
            "error_family": ErrorFamily.PROCESS_LOST,
            "final_text": None,
            "tokens_in": 0,
            "tokens_out": 0,
            "cache_read_tokens": 0,
            "cost_micro_usd": 0,
            "completed_at": completed_at,
        }
    )


async def test_totals_equal_the_sum_of_distinct_runs(topics: KafkaSettings) -> None:
    a_nov_1 = _run(ORG_A, NOVEMBER, cost=1_250_000, tokens=(1200, 300))
    a_nov_2 = _run(ORG_A, NOVEMBER, cost=3_333, tokens=(50, 5))
    a_nov_dry = _run(ORG_A, NOVEMBER, cost=40_000, tokens=(400, 40), dry_run=True)
    a_dec = _run(ORG_A, DECEMBER, cost=999_999, tokens=(900, 90))
    b_nov = _run(ORG_B, NOVEMBER, cost=1, tokens=(1, 1))
    runs = [a_nov_1, a_nov_2, a_nov_dry, a_dec, b_nov]
    sent = [
        a_nov_1,
        _lost_closure(a_nov_2, DECEMBER),  # the dispatcher gave up on it first (in the next month) ...
        a_nov_2,  # ... then its slow runner reported the real usage: this one counts
        a_nov_dry,
        a_dec,
        _lost_closure(a_dec, DECEMBER),  # a closure after the real record adds nothing
        b_nov,
        a_nov_1,  # a redelivery is the same record again (the outbox relay resends it after a crash)
    ]
    async with RecordProducer(topics, service="test") as producer:
        for record in sent:
            await producer.send(Topics.RUN_COMPLETED, record)

    ledger = await billing_consumer.consume(topics.bootstrap_servers, topic_prefix=topics.topic_prefix)

    lines = {(line.org_id, line.month): line for line in ledger.lines()}
    assert set(lines) == {(str(ORG_A), "2026-11"), (str(ORG_A), "2026-12"), (str(ORG_B), "2026-11")}
    november = lines[(str(ORG_A), "2026-11")]
    assert november.runs == 3
    assert november.cost_micro_usd == 1_250_000 + 3_333 + 40_000
    assert (november.tokens_in, november.tokens_out, november.cache_read_tokens) == (1650, 345, 21)
    assert (november.dry_runs, november.dry_run_cost_micro_usd) == (1, 40_000)
    assert str(november.cost_usd) == "1.293333"
    assert (lines[(str(ORG_A), "2026-12")].runs, lines[(str(ORG_A), "2026-12")].cost_micro_usd) == (1, 999_999)
    assert (lines[(str(ORG_B), "2026-11")].runs, lines[(str(ORG_B), "2026-11")].cost_micro_usd) == (1, 1)
    assert sum(line.cost_micro_usd for line in ledger.lines()) == sum(r.cost_micro_usd for r in runs)
    assert (ledger.duplicates, ledger.superseded) == (2, 1)
    assert [line.org_id for line in ledger.lines("2026-12")] == [str(ORG_A)]

    # The same figures from the script itself, run as an external team would run it.
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLES / "billing_consumer.py"),
        "--bootstrap-servers",
        topics.bootstrap_servers,
        "--topic-prefix",
        topics.topic_prefix,
        "--month",
        "2026-11",
        "--json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, err.decode()
    printed = {(item["org_id"], item["month"]): item for item in json.loads(out)}
    assert set(printed) == {(str(ORG_A), "2026-11"), (str(ORG_B), "2026-11")}
    assert printed[(str(ORG_A), "2026-11")] == asdict(november)


async def test_a_newer_writer_with_an_extra_optional_field_is_read(topics: KafkaSettings, tmp_path: Path) -> None:
    """Forward tolerance: a producer upgraded to a schema with a new optional field (a new
    schema id the consumer's copy of ``schemas/`` gains) does not break the consumer's reader."""
    schemas = tmp_path / "schemas"
    shutil.copytree(schemas_dir(), schemas)
    newer = copy.deepcopy(json.loads((schemas / "run_completed.avsc").read_text()))
    newer["fields"].append({"name": "region", "type": ["null", "string"], "default": None, "doc": "test"})
    (schemas / "released" / "run_completed" / "v999.avsc").write_text(json.dumps(newer))
    catalog = json.loads((schemas / "catalog.json").read_text())
    catalog["subjects"]["run_completed-value"].append(
        {"version": 999, "id": 999_999, "path": "released/run_completed/v999.avsc", "sha256": ""}
    )
    (schemas / "catalog.json").write_text(json.dumps(catalog))

    record = _run(ORG_A, NOVEMBER, cost=77, tokens=(7, 7))
    datum = {**record.model_dump(mode="python"), "region": "eu"}
    datum = {key: (str(value) if isinstance(value, uuid.UUID) else value) for key, value in datum.items()}
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(newer), datum)
    async with RecordProducer(topics, service="test") as producer:
        await producer.send_raw(
            Topics.RUN_COMPLETED, key=encode_key(Topics.RUN_COMPLETED, record), value=frame(999_999, body.getvalue())
        )

    ledger = await billing_consumer.consume(
        topics.bootstrap_servers, topic_prefix=topics.topic_prefix, schemas_dir=schemas
    )
    assert [(line.runs, line.cost_micro_usd) for line in ledger.lines()] == [(1, 77)]

    # The repository's own copy does not know id 999999: an error, never a silently skipped run.
    with pytest.raises(billing_consumer.ContractViolation, match="999999"):
        await billing_consumer.consume(topics.bootstrap_servers, topic_prefix=topics.topic_prefix)
