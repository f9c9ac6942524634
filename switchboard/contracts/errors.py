"""The one error the contracts package raises, with a stable machine-readable code.

Consumers route on ``code`` (dead-letter it, retry it, page someone) and put it in the
dead-letter record, so codes never change meaning; new failures get new codes.
"""

from __future__ import annotations

from enum import StrEnum


class ContractErrorCode(StrEnum):
    """Why a record could not be encoded or decoded."""

    # The value is shorter than the 5-byte frame header (or missing: a tombstone).
    TRUNCATED_FRAME = "truncated_frame"
    # The first byte is not the Confluent magic byte 0: not our wire format.
    BAD_MAGIC_BYTE = "bad_magic_byte"
    # The frame names a schema id that neither the catalog nor the registry knows.
    UNKNOWN_SCHEMA_ID = "unknown_schema_id"
    # The writer schema is known but cannot be read with the topic's current schema.
    SCHEMA_MISMATCH = "schema_mismatch"
    # The Avro body is corrupt, truncated or has trailing bytes.
    UNDECODABLE_BODY = "undecodable_body"
    # The record does not fit its contract (wrong type for the topic, value out of range...).
    INVALID_RECORD = "invalid_record"
    # The current schema of a topic has no id: not released in the catalog / not registered.
    UNKNOWN_SCHEMA = "unknown_schema"
    # The schema registry could not be reached or answered with a server error.
    REGISTRY_UNAVAILABLE = "registry_unavailable"
    # The schema registry refused our credentials (401/403): a setting to fix, not a bad record.
    REGISTRY_UNAUTHORIZED = "registry_unauthorized"
    # The schema registry answered with an unexpected client error.
    REGISTRY_ERROR = "registry_error"


class ContractError(Exception):
    """A record could not cross the contract boundary; ``code`` says why, stably.

    ``retryable`` is true only for failures that may pass later without any change to the
    record (the registry down or refusing our credentials: a consumer waits for it rather than
    dead-letter live traffic while a rotated key is fixed); everything else is permanent for
    that record.
    """

    def __init__(self, code: ContractErrorCode, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    @property
    def retryable(self) -> bool:
        return self.code in (ContractErrorCode.REGISTRY_UNAVAILABLE, ContractErrorCode.REGISTRY_UNAUTHORIZED)
