"""Offline checks of the deployment files: no broker, no database, no network.

The overlays are rendered once per session with kustomize (see scripts/deploy/validate.py
for which kustomize); everything else reads files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scripts.deploy import validate

FIXTURES = Path(__file__).parent / "fixtures"
OVERLAYS = {path.name: path for path in validate.OVERLAY_DIRS}


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict[str, Any]]]:
    """overlay name -> the objects ``kustomize build`` renders for it."""
    return {name: validate.render(path) for name, path in OVERLAYS.items()}


def objects_of(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o.get("kind") == kind}


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]
