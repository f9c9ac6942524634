"""Structured JSON logs with the fields of [004 §8.3], secrets scrubbed.

Use ``log = get_logger(__name__)`` and pass context as keyword ``extra``
fields (``run_id``, ``agent_id``, ``organization_id``...): they become top-level
JSON keys. Every record passes through :func:`scrub` on its way out, so a
secret passed by mistake is masked rather than written.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from switchboard.observability.scrubbing import scrub, scrub_text

# Attributes every LogRecord has; anything else was passed through ``extra``.
_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, service, module, event, plus extra fields."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self._service = service

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "service": self._service,
            "module": record.name,
            "event": scrub_text(record.getMessage()),
        }
        extras = {k: v for k, v in vars(record).items() if k not in _STANDARD_ATTRS and not k.startswith("_")}
        payload.update(scrub(extras))
        if record.exc_info:
            payload["exception"] = scrub_text(self.formatException(record.exc_info))
        return json.dumps(payload, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """Readable single-line logs for a terminal; still scrubbed."""

    def format(self, record: logging.LogRecord) -> str:
        return scrub_text(super().format(record))


def configure_logging(service: str, *, level: str = "INFO", json_logs: bool = True) -> None:
    """Route all logging to stderr in one format; call once at process start."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter(service) if json_logs else TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("aiokafka", "kafka", "faust", "mode", "httpx", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(name)
