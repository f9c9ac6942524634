"""Fixtures of the contract tests: the committed catalog and a serde on it."""

from __future__ import annotations

import pytest

from switchboard.contracts import CatalogRegistry, Serde
from switchboard.contracts.schemas import schemas_dir


@pytest.fixture(scope="session")
def catalog() -> CatalogRegistry:
    return CatalogRegistry(schemas_dir())


@pytest.fixture(scope="session")
def serde(catalog: CatalogRegistry) -> Serde:
    return Serde(catalog)
