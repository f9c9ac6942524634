"""AES-GCM encryption of secrets at rest (provider keys, TOTP seeds) with rotating keys.

Each value is sealed with a fresh 12-byte IV under the *primary* key of a key
ring and stored with that key's id, so keys rotate without downtime: add a new
key in front (it becomes primary), every new write uses it, old rows still
decrypt with the key id they name, and a re-encryption job moves them over;
then the old key can be dropped [004 §7, SPEC §10].

Keys come from ``SWITCHBOARD_ENCRYPTION_KEYS``: comma-separated ``id:base64``
entries of 32-byte keys, primary first. In development a fixed, clearly named
key (id ``dev-insecure``) is used when none is configured; production refuses
to start without real keys. Associated data binds a ciphertext to its row, so
a ciphertext copied to another row or org does not decrypt.
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from switchboard.settings import RuntimeSettings, SharedSettings

IV_BYTES = 12
TAG_BYTES = 16
KEY_BYTES = 32
DEV_KEY_ID = "dev-insecure"
_DEV_KEY = b"switchboard-development-only-key"  # 32 bytes; refused in production


class CryptoError(Exception):
    """Sealing or opening failed; ``code`` is stable, the message never holds key material."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Sealed:
    """What is stored: ciphertext, IV, tag and the id of the key that sealed it."""

    ciphertext: bytes
    iv: bytes
    tag: bytes
    key_id: str


class EncryptionSettings(SharedSettings):
    model_config = SettingsConfigDict(env_prefix="SWITCHBOARD_")

    encryption_keys: SecretStr | None = Field(default=None, description="id:base64key[,id:base64key...], primary first")


class KeyRing:
    """Named AES-256 keys; the first is the primary (used to seal)."""

    def __init__(self, keys: list[tuple[str, bytes]]) -> None:
        if not keys:
            raise CryptoError("no_keys", "the key ring is empty")
        for key_id, key in keys:
            if len(key) != KEY_BYTES:
                raise CryptoError("bad_key", f"key {key_id!r} must be {KEY_BYTES} bytes")
        self._keys = dict(keys)
        self.primary_id = keys[0][0]

    @classmethod
    def parse(cls, spec: str) -> KeyRing:
        entries: list[tuple[str, bytes]] = []
        for item in filter(None, (part.strip() for part in spec.split(","))):
            key_id, sep, encoded = item.partition(":")
            if not sep or not key_id:
                raise CryptoError("bad_key_spec", "each key must be written id:base64")
            try:
                entries.append((key_id, base64.b64decode(encoded, validate=True)))
            except (binascii.Error, ValueError) as exc:
                raise CryptoError("bad_key_spec", f"key {key_id!r} is not valid base64") from exc
        return cls(entries)

    @classmethod
    def from_settings(
        cls, runtime: RuntimeSettings | None = None, settings: EncryptionSettings | None = None
    ) -> KeyRing:
        runtime = runtime or RuntimeSettings()
        settings = settings or EncryptionSettings()
        if settings.encryption_keys is None or not settings.encryption_keys.get_secret_value().strip():
            if runtime.is_production:
                raise CryptoError("no_keys", "SWITCHBOARD_ENCRYPTION_KEYS must be set when SWITCHBOARD_ENV=production")
            return cls([(DEV_KEY_ID, _DEV_KEY)])
        ring = cls.parse(settings.encryption_keys.get_secret_value())
        if runtime.is_production and DEV_KEY_ID in ring._keys:
            raise CryptoError("dev_key_in_production", "the development key cannot be used in production")
        return ring

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Every key id in the ring, primary first (ids are not secret; keys are)."""
        return tuple(self._keys)

    def __contains__(self, key_id: object) -> bool:
        return key_id in self._keys

    def with_primary(self, key_id: str, key: bytes) -> KeyRing:
        """A new ring with ``key`` in front: the first step of a rotation (old keys keep opening)."""
        return KeyRing([(key_id, key), *((k, v) for k, v in self._keys.items() if k != key_id)])

    @staticmethod
    def generate_key() -> str:
        """A new random key, base64, for operators (``switchboard admin new-key``)."""
        return base64.b64encode(os.urandom(KEY_BYTES)).decode()

    def seal(self, plaintext: bytes, *, aad: bytes) -> Sealed:
        iv = os.urandom(IV_BYTES)
        sealed = AESGCM(self._keys[self.primary_id]).encrypt(iv, plaintext, aad)
        return Sealed(ciphertext=sealed[:-TAG_BYTES], iv=iv, tag=sealed[-TAG_BYTES:], key_id=self.primary_id)

    def open(self, sealed: Sealed, *, aad: bytes) -> bytes:
        key = self._keys.get(sealed.key_id)
        if key is None:
            raise CryptoError("unknown_key_id", f"no key with id {sealed.key_id!r} in the key ring")
        try:
            return AESGCM(key).decrypt(sealed.iv, sealed.ciphertext + sealed.tag, aad)
        except InvalidTag as exc:
            raise CryptoError("decrypt_failed", "ciphertext, key or associated data do not match") from exc

    def needs_rotation(self, sealed: Sealed) -> bool:
        return sealed.key_id != self.primary_id

    def rotate(self, sealed: Sealed, *, aad: bytes) -> Sealed:
        """Re-seal under the primary key (a no-op result if already there)."""
        if not self.needs_rotation(sealed):
            return sealed
        return self.seal(self.open(sealed, aad=aad), aad=aad)
