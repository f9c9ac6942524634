"""Secrets the API issues and checks: bearer tokens, password hashes, TOTP codes.

- Tokens are 32 random bytes, url-safe, prefixed ``sbt_`` so leaked tokens are
  recognisable by secret scanners; only their SHA-256 is stored.
- Passwords use scrypt (stdlib, memory-hard) with a per-user salt.
- TOTP is RFC 6238 (SHA-1, 6 digits, 30 s) as authenticator apps expect, from
  the ``cryptography`` package; one step of clock drift is accepted either way.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time

from cryptography.hazmat.primitives.hashes import SHA1
from cryptography.hazmat.primitives.twofactor import InvalidToken
from cryptography.hazmat.primitives.twofactor.totp import TOTP

from switchboard.db.lookups import hash_api_token

TOKEN_PREFIX = "sbt_"
TOTP_DIGITS = 6
TOTP_STEP_S = 30
_SCRYPT = {"n": 2**14, "r": 8, "p": 1}


def new_token() -> tuple[str, bytes, str]:
    """A fresh bearer token: (plaintext shown once, stored hash, display prefix)."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    return token, hash_api_token(token), token[:12]


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, **_SCRYPT)
    return "scrypt$" + base64.b64encode(salt).decode() + "$" + base64.b64encode(digest).decode()


def verify_password(password: str, stored: str | None) -> bool:
    if not stored or not stored.startswith("scrypt$"):
        # Spend the same time as a real check so timing does not reveal unknown users.
        hashlib.scrypt(password.encode(), salt=b"0" * 16, **_SCRYPT)
        return False
    _, salt_b64, digest_b64 = stored.split("$", 2)
    digest = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt_b64), **_SCRYPT)
    return hmac.compare_digest(digest, base64.b64decode(digest_b64))


def new_totp_secret() -> bytes:
    return secrets.token_bytes(20)


def totp_uri(secret: bytes, *, account: str, issuer: str = "Switchboard") -> str:
    """The otpauth:// URI an authenticator app scans."""
    return TOTP(secret, TOTP_DIGITS, SHA1(), TOTP_STEP_S).get_provisioning_uri(account, issuer)


def totp_code(secret: bytes, at: float | None = None) -> str:
    """The code for ``at`` (now by default); tests and the demo use it."""
    return TOTP(secret, TOTP_DIGITS, SHA1(), TOTP_STEP_S).generate(int(at if at is not None else time.time())).decode()


def totp_step(secret: bytes, code: str, at: float | None = None) -> int | None:
    """The time step ``code`` belongs to (the current one or one either side), or None if it matches none.

    Callers keep the last step accepted per user and refuse a step not after it: a code is good once."""
    if not (code.isdigit() and len(code) == TOTP_DIGITS):
        return None
    totp = TOTP(secret, TOTP_DIGITS, SHA1(), TOTP_STEP_S)
    now = int(at if at is not None else time.time())
    for drift in (0, -TOTP_STEP_S, TOTP_STEP_S):
        try:
            totp.verify(code.encode(), now + drift)
            return (now + drift) // TOTP_STEP_S
        except InvalidToken:
            continue
    return None


def verify_totp(secret: bytes, code: str, at: float | None = None) -> bool:
    """True when ``code`` matches the current step or one step either side."""
    return totp_step(secret, code, at) is not None
