"""Errors a handler may raise to tell the consumer what to do with a record."""

from __future__ import annotations

import psycopg
import sqlalchemy.exc
from aiokafka.errors import MessageSizeTooLargeError, RecordListTooLargeError, RecordTooLargeError


class PermanentRecordError(Exception):
    """The record can never be processed (bad content): dead-letter it now, no retries.

    ``code`` is stable and machine-readable; it travels in the dead-letter record.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class RetryableRecordError(Exception):
    """A transient failure (database or upstream down): retried with backoff until it heals."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# Connection-level failures of what a handler talks to: the database restarting or failing over,
# a dropped connection, a deadlock or serialization failure (psycopg's OperationalError covers them).
_TRANSIENT: tuple[type[BaseException], ...] = (
    RetryableRecordError,
    ConnectionError,
    TimeoutError,
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)


def is_transient(exc: BaseException) -> bool:
    """A failure of what the handler talks to, not of the record: retried until it heals, never
    dead-lettered. A good record dead-lettered (and its offset committed) during a database
    restart of a few seconds was a lost reply: the dead-letter topic is for bad input."""
    if isinstance(exc, _TRANSIENT):
        return True
    return isinstance(exc, sqlalchemy.exc.DBAPIError) and bool(exc.connection_invalidated)


# A record the broker (or the producer's size limit) will never take as it is.
SIZE_ERRORS: tuple[type[BaseException], ...] = (MessageSizeTooLargeError, RecordTooLargeError, RecordListTooLargeError)
