"""Kafka plumbing shared by every service.

- ``admin``       create the registered topics idempotently, check partition counts.
- ``producer``    an idempotent producer that speaks records, not bytes.
- ``consumer``    the one way services consume: decode, handle, retry, dead-letter, commit.
- ``dead_letter`` what a dead-letter record says and how it is published.
- ``redaction``   keeps SASL credentials out of aiokafka's debug logging.
"""

from switchboard.kafka import redaction

# aiokafka's DEBUG request lines would print SASL passwords: filtered before any client exists.
redaction.install()
