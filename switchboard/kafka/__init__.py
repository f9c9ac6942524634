"""Kafka plumbing shared by every service.

- ``admin``       create the registered topics idempotently, check partition counts.
- ``producer``    an idempotent producer that speaks records, not bytes.
- ``consumer``    the one way services consume: decode, handle, retry, dead-letter, commit.
- ``dead_letter`` what a dead-letter record says and how it is published.
"""
