"""A schema registry that is slow or down at first: the catalog's answers behind a blocking call."""

from __future__ import annotations

import time
from typing import Any

from switchboard.contracts import CatalogRegistry, ContractError, ContractErrorCode
from switchboard.contracts.schemas import schemas_dir


class FlakyRegistry:
    """The catalog behind a registry whose lookups of a schema by id block ``delay_s`` (as the HTTP
    client does) and fail the first ``failures`` times with ``registry_unavailable``."""

    def __init__(self, *, delay_s: float = 0.0, failures: int = 0) -> None:
        self._catalog = CatalogRegistry(schemas_dir())
        self.delay_s = delay_s
        self.failures = failures
        self.lookups = 0

    def id_for(self, subject: str, schema: Any) -> int:
        return self._catalog.id_for(subject, schema)

    def schema_by_id(self, schema_id: int) -> Any:
        self.lookups += 1
        time.sleep(self.delay_s)
        if self.lookups <= self.failures:
            raise ContractError(ContractErrorCode.REGISTRY_UNAVAILABLE, "connection refused")
        return self._catalog.schema_by_id(schema_id)
