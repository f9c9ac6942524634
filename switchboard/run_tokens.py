"""Short-lived tokens that let one run call the internal MCP tool server.

The runner mints one token per run; the tool server (services/api/mcp) verifies
it on every request. A token says which org, run and conversation it acts for
and which tools it may call, so a tool can never touch another tenant's data, a
tool the version was not granted cannot be called even by a confused client,
and a leaked token is worth little: it expires (``expires_at``) and is bound to
one run.

Format: ``sbrt_<payload>.<signature>``, both base64url without padding; the
payload is compact JSON, the signature HMAC-SHA256 over the payload with the
secret shared by the runner and the tool server (``SWITCHBOARD_RUN_TOKEN_SECRET``).
HMAC rather than JWT: both ends are ours, and there is no algorithm field to
negotiate or to get wrong. In development a fixed, clearly named secret is
used when none is configured; production refuses to start without one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from dataclasses import dataclass, field

from pydantic import SecretStr
from pydantic_settings import SettingsConfigDict

from switchboard.settings import RuntimeSettings, SharedSettings, require_real_secret, stack_env_files

TOKEN_PREFIX = "sbrt_"
_DEV_SECRET = b"switchboard-development-only-run-token-secret"


class RunTokenError(Exception):
    """A token was refused; ``code`` is stable (``malformed``, ``bad_signature``, ``expired``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class RunTokenSettings(SharedSettings):
    model_config = SettingsConfigDict(
        env_prefix="SWITCHBOARD_", env_file=stack_env_files(), extra="ignore", frozen=True
    )

    run_token_secret: SecretStr | None = None

    def secret(self, runtime: RuntimeSettings | None = None) -> bytes:
        """The signing secret; the development secret outside production when none is set."""
        runtime = runtime or RuntimeSettings()
        if self.run_token_secret is None or not self.run_token_secret.get_secret_value().strip():
            require_real_secret("SWITCHBOARD_RUN_TOKEN_SECRET", self.run_token_secret, runtime)
            return _DEV_SECRET
        require_real_secret("SWITCHBOARD_RUN_TOKEN_SECRET", self.run_token_secret, runtime)
        return self.run_token_secret.get_secret_value().encode()


@dataclass(frozen=True)
class RunTokenClaims:
    """What a run may do on the tool server."""

    org_id: uuid.UUID
    run_id: uuid.UUID
    agent_id: uuid.UUID
    conversation_id: uuid.UUID | None
    contact_id: uuid.UUID | None
    channel_session_id: uuid.UUID | None
    tools: frozenset[str]
    dry_run: bool
    expires_at: int  # unix seconds
    issued_at: int = field(default_factory=lambda: int(time.time()))
    # Set by the API when the owner approved an action of this run (services/api/autonomy): it acts
    # after the run ended. Never in a token, so a run cannot claim it.
    approved: bool = False

    def allows(self, tool_name: str) -> bool:
        return tool_name in self.tools


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(secret: bytes, payload: str) -> str:
    return _b64(hmac.new(secret, payload.encode(), hashlib.sha256).digest())


def _opt_uuid(value: object) -> uuid.UUID | None:
    return None if value is None else uuid.UUID(str(value))


def mint_run_token(secret: bytes, claims: RunTokenClaims) -> str:
    body = {
        "org": str(claims.org_id),
        "run": str(claims.run_id),
        "agent": str(claims.agent_id),
        "conv": str(claims.conversation_id) if claims.conversation_id else None,
        "contact": str(claims.contact_id) if claims.contact_id else None,
        "session": str(claims.channel_session_id) if claims.channel_session_id else None,
        "tools": sorted(claims.tools),
        "dry": claims.dry_run,
        "iat": claims.issued_at,
        "exp": claims.expires_at,
    }
    payload = _b64(json.dumps(body, separators=(",", ":"), sort_keys=True).encode())
    return f"{TOKEN_PREFIX}{payload}.{_sign(secret, payload)}"


def verify_run_token(secret: bytes, token: str, *, now: float | None = None) -> RunTokenClaims:
    """The claims of a valid token; raises :class:`RunTokenError` (never echoing the token)."""
    if not token.startswith(TOKEN_PREFIX) or token.count(".") != 1:
        raise RunTokenError("malformed", "not a run token")
    payload, signature = token[len(TOKEN_PREFIX) :].split(".")
    if not hmac.compare_digest(_sign(secret, payload), signature):
        raise RunTokenError("bad_signature", "run token signature does not match")
    try:
        body = json.loads(_unb64(payload))
        claims = RunTokenClaims(
            org_id=uuid.UUID(body["org"]),
            run_id=uuid.UUID(body["run"]),
            agent_id=uuid.UUID(body["agent"]),
            conversation_id=_opt_uuid(body.get("conv")),
            contact_id=_opt_uuid(body.get("contact")),
            channel_session_id=_opt_uuid(body.get("session")),
            tools=frozenset(str(t) for t in body["tools"]),
            dry_run=bool(body["dry"]),
            expires_at=int(body["exp"]),
            issued_at=int(body["iat"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise RunTokenError("malformed", "run token payload is malformed") from exc
    if claims.expires_at <= (time.time() if now is None else now):
        raise RunTokenError("expired", "run token expired")
    return claims
