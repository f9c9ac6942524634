"""requirements.lock pins the runtime closure the image installs."""

from __future__ import annotations

import tomllib
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from scripts.deploy import lock


def _pins() -> dict[str, str]:
    return lock.parse_lock(lock.LOCK_FILE.read_text())


def test_lock_pins_every_direct_dependency_within_its_range() -> None:
    pyproject = tomllib.loads((lock.REPO_ROOT / "pyproject.toml").read_text())
    pins = _pins()
    for line in pyproject["project"]["dependencies"]:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not in requirements.lock: run `make lock`"
        assert req.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} violates {req}"


def test_lock_is_closed_where_the_venv_has_the_locked_versions() -> None:
    """Each locked package installed here at its locked version has its requirements locked too.

    (Packages the venv holds at another version are skipped: a fresh CI venv may resolve newer
    releases than the lock; the image build's `pip install --no-index` is the final check.)
    """
    pins = _pins()
    for name, version in pins.items():
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if dist.version != version:
            continue
        for req in lock._requirements(dist, ()):
            assert canonicalize_name(req.name) in pins, f"{name} needs {req.name}, missing from requirements.lock"


def test_no_dev_tool_is_locked() -> None:
    assert not {"pytest", "mypy", "ruff", "kubernetes-validate", "check-jsonschema"} & set(_pins())
