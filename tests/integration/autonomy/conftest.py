"""The runner harness and the API of tests/integration/runner, reused: one per module."""

from __future__ import annotations

from tests.integration.runner.conftest import api, module_kafka, rh

__all__ = ["api", "module_kafka", "rh"]
