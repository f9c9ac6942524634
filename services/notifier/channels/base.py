"""The one base every channel plugin implements, and how its failures are classified.

A channel turns "send this text to this chat" into one provider call. It never retries
(``services.notifier.retry`` does, the same way for every channel) and never touches the
database; it only says, through :class:`ChannelError`, whether a failure is *transient*
(may succeed later: timeouts, connection errors, 5xx, 429) or *permanent* (a 4xx: the
request itself is wrong, repeating it cannot help).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

import httpx

from switchboard.egress import EgressRefused

TIMEOUT = "timeout"
TRANSPORT_ERROR = "transport_error"
# Server errors that say the request was not handled: a gateway with no upstream, a server not ready.
_NOT_TAKEN = frozenset({502, 503})


@dataclass(frozen=True)
class Destination:
    """Where a message goes and with which credentials (``secret`` never leaves this process)."""

    base_url: str
    session: str
    chat_id: str
    secret: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class SendResult:
    """The channel accepted the message; ``external_id`` is its id there, when it gave one."""

    external_id: str | None


class ChannelError(Exception):
    """A failed send; ``code`` is stable (``http_503``, ``timeout``, ``connect_error``...)."""

    def __init__(self, code: str, message: str, *, transient: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.transient = transient
        self.status = status

    @property
    def ambiguous(self) -> bool:
        """The request may have reached the channel and been sent all the same: no answer in time, a
        connection dropped mid-exchange, or a server error other than "not taken" (502, 503: a proxy
        or a server that did not handle it). A retry first waits for the channel's echo of it."""
        if self.code in (TIMEOUT, TRANSPORT_ERROR):
            return True
        return self.status is not None and self.status >= 500 and self.status not in _NOT_TAKEN


def is_transient_status(status: int) -> bool:
    """5xx and 429 may heal by themselves; every other 4xx will not."""
    return status >= 500 or status == 429


def raise_for_response(response: httpx.Response) -> None:
    """A ``ChannelError`` for any non-2xx answer (the body is not echoed: it may hold the text)."""
    if response.is_success:
        return
    status = response.status_code
    raise ChannelError(
        f"http_{status}", f"the channel answered HTTP {status}", transient=is_transient_status(status), status=status
    )


async def post_json(
    client: httpx.AsyncClient, url: str, *, content: bytes, headers: dict[str, str], timeout_s: float
) -> httpx.Response:
    """POST a JSON body, mapping transport failures onto transient ``ChannelError``s."""
    try:
        response = await client.post(
            url, content=content, headers={"Content-Type": "application/json", **headers}, timeout=timeout_s
        )
    except httpx.TimeoutException as exc:
        raise ChannelError(TIMEOUT, f"no answer from the channel within {timeout_s}s", transient=True) from exc
    except EgressRefused as exc:  # the tenant's URL leads where the policy forbids: it will not change by itself
        raise ChannelError(exc.code, str(exc), transient=False) from exc
    except httpx.ConnectError as exc:  # the request never left: always safe to repeat
        raise ChannelError("connect_error", "could not connect to the channel", transient=True) from exc
    except httpx.TransportError as exc:
        raise ChannelError(TRANSPORT_ERROR, f"the exchange failed: {type(exc).__name__}", transient=True) from exc
    raise_for_response(response)
    return response


class Channel(ABC):
    """A way to send text to a person. Subclasses set ``name`` and implement ``send``."""

    name: ClassVar[str]

    def __init__(self, client: httpx.AsyncClient, *, timeout_s: float) -> None:
        self._client = client
        self._timeout_s = timeout_s

    @abstractmethod
    async def send(
        self, destination: Destination, text: str, *, idempotency_key: str, from_model: bool = False
    ) -> SendResult:
        """Send once (no retry); raise :class:`ChannelError` on failure. ``from_model``: a model wrote
        ``text`` (a reply, an agent's queued message), so a chat channel may render its Markdown."""
