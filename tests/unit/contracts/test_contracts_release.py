"""The release tool: refuses incompatible schemas, releases compatible ones with fresh ids."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from switchboard.contracts import CatalogRegistry, Topics
from switchboard.contracts.release import main, plan_release, release
from switchboard.contracts.schemas import SCHEMAS_DIR_ENV, schemas_dir


@pytest.fixture
def schemas_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "schemas"
    shutil.copytree(schemas_dir(), directory)
    monkeypatch.setenv(SCHEMAS_DIR_ENV, str(directory))
    return directory


def _edit(directory: Path, topic: str, edit: object) -> None:
    path = directory / f"{topic}.avsc"
    schema = json.loads(path.read_text())
    schema["fields"].append(edit)
    path.write_text(json.dumps(schema, indent=2))


def test_nothing_to_release_on_a_clean_tree(schemas_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check"]) == 0
    assert "would release" not in capsys.readouterr().out


def test_a_compatible_change_is_released_with_the_next_global_id(schemas_copy: Path) -> None:
    _edit(
        schemas_copy,
        "steering",
        {"name": "note", "type": ["null", "string"], "default": None, "doc": "An operator's note."},
    )
    before = CatalogRegistry(schemas_copy)
    top_id = max(e.schema_id for vs in before.entries().values() for e in vs)
    released = len(before.versions(Topics.STEERING.subject))
    assert plan_release(Topics.STEERING, schemas_copy).next_version == released + 1
    assert main(["steering"]) == 0
    after = CatalogRegistry(schemas_copy)
    *_, previous, new = after.versions(Topics.STEERING.subject)
    assert (new.version, new.schema_id) == (released + 1, top_id + 1)
    assert (schemas_copy / "released" / "steering" / f"v{released + 1}.avsc").is_file()
    assert after.id_for(Topics.STEERING.subject, Topics.STEERING.load_schema(schemas_copy)) == new.schema_id
    assert after.schema_by_id(previous.schema_id) != after.schema_by_id(new.schema_id)


def test_an_incompatible_change_is_refused(schemas_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _edit(
        schemas_copy,
        "run_completed",
        {"name": "invoice_id", "type": "string", "doc": "Required and without a default."},
    )
    catalog_before = (schemas_copy / "catalog.json").read_text()
    assert main(["--check"]) == 1
    assert main([]) == 1
    out = capsys.readouterr().out
    assert "run_completed: NOT backward compatible" in out
    assert "RunCompleted.invoice_id: field added without a default" in out
    assert (schemas_copy / "catalog.json").read_text() == catalog_before
    plans = release([Topics.RUN_COMPLETED], schemas_copy)
    assert plans[0].blocked
