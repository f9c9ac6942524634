"""Errors a handler may raise to tell the consumer what to do with a record."""

from __future__ import annotations


class PermanentRecordError(Exception):
    """The record can never be processed (bad content): dead-letter it now, no retries.

    ``code`` is stable and machine-readable; it travels in the dead-letter record.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class RetryableRecordError(Exception):
    """A transient failure (database or upstream down): retry with backoff, then dead-letter."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
