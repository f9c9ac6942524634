"""Keep SASL credentials out of the logs: aiokafka's DEBUG lines print every request it sends.

``aiokafka.conn`` logs each request at DEBUG with its repr, and the SASL/PLAIN authenticate
request's repr holds ``username\\0username\\0password`` in clear. With ``LOG_LEVEL=DEBUG`` (or a
test's log capture) the broker password would land in the logs. A filter on that logger drops
exactly those records; every other aiokafka line is kept. Installed when ``switchboard.kafka``
is imported, which every Kafka client of ours does first.
"""

from __future__ import annotations

import logging
from typing import Final

AIOKAFKA_CONNECTION_LOGGER: Final = "aiokafka.conn"
_CREDENTIAL_MARKER: Final = "sasl_auth_bytes"


class SaslCredentialFilter(logging.Filter):
    """Refuses the records of a SASL authenticate request (the only ones that carry a secret)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.DEBUG:
            return True
        try:
            return _CREDENTIAL_MARKER not in record.getMessage()
        except Exception:  # a record that cannot even be formatted says nothing worth the risk
            return False


def install() -> None:
    """Attach the filter to aiokafka's connection logger, once."""
    logger = logging.getLogger(AIOKAFKA_CONNECTION_LOGGER)
    if not any(isinstance(f, SaslCredentialFilter) for f in logger.filters):
        logger.addFilter(SaslCredentialFilter())
