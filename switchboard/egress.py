"""Where a URL a tenant typed may lead: the guard against server-side request forgery.

Tenants set URLs that our processes then call with their own credentials: a channel
session's WAHA ``base_url`` and the org webhook (the notifier), a provider credential's
``base_url`` (the runner, the API's key check). Without a guard, a tenant could point one
at the cloud's metadata service or at an internal endpoint and have Switchboard call it.

Two layers, both here:

- **When the URL is saved** (``refuse_literal_address``): a literal address that is never a
  legitimate destination — link-local (169.254.0.0/16 holds the metadata service),
  unspecified, multicast, reserved — is refused with a 422.
- **When a call is made** (``GuardedTransport``, an httpx transport): the host is resolved and
  every address it resolves to is checked by the process's ``EgressPolicy``, so a host name
  pointing at a refused address is caught too. The request fails with ``EgressRefused`` (code
  ``egress_refused``) before any byte is sent.

Private networks and loopback are allowed by default: a self-hosted WAHA inside the cluster
is the normal deployment. A multi-tenant operator sets ``deny_private`` and lists the
networks tenants may reach (``allowed_cidrs``: the in-cluster WAHA's, say); the URLs the
operator configured itself (the platform's default WAHA) are trusted by host and port.

Known limit: the address is checked at resolution and the connection resolves again, so a
DNS answer that changes in between (rebinding) is not caught here; an egress NetworkPolicy
is the network-level complement (docs/security.md).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

EGRESS_REFUSED: Final = "egress_refused"
# 100.64.0.0/10 (carrier-grade NAT) is where some clouds put internal services.
_SHARED: Final = ipaddress.ip_network("100.64.0.0/10")


class EgressRefused(httpx.TransportError):
    """A call to an address the policy refuses; ``code`` is stable. The message names no address."""

    code = EGRESS_REFUSED

    def __init__(self, reason: str) -> None:
        super().__init__(f"the destination is not allowed ({reason})")
        self.reason = reason


def never_allowed(address: IPAddress) -> str | None:
    """Why ``address`` is never a destination (None when it may be one)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return never_allowed(address.ipv4_mapped)
    if address.is_loopback:
        return None  # a private destination (IPv6 ::1 also sits in a reserved block)
    if address.is_link_local:
        return "link_local"
    if address.is_unspecified:
        return "unspecified"
    if address.is_multicast:
        return "multicast"
    if address.is_reserved:
        return "reserved"
    return None


def is_private(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return is_private(address.ipv4_mapped)
    return address.is_loopback or address.is_private or address in _SHARED


def refuse_literal_address(host: str) -> None:
    """For validators of saved URLs: ``ValueError`` when ``host`` is an address that is never a
    destination. Host names pass: they are checked where they are resolved."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return
    if never_allowed(address) is not None:
        raise ValueError("this address is not allowed")


@dataclass(frozen=True)
class EgressPolicy:
    """Which resolved addresses a process may call on a tenant's behalf."""

    deny_private: bool = False
    allowed: tuple[IPNetwork, ...] = ()
    # (host, port) of URLs the operator configured: trusted as they are, whatever they resolve to.
    trusted: frozenset[tuple[str, int]] = field(default_factory=frozenset)

    @classmethod
    def build(
        cls, *, deny_private: bool, allowed_cidrs: Iterable[str], trusted_urls: Iterable[str] = ()
    ) -> EgressPolicy:
        """From settings: CIDR strings (a bad one raises ``ValueError`` at start) and the URLs the
        operator configured (their hosts are trusted)."""
        allowed = tuple(ipaddress.ip_network(c.strip(), strict=False) for c in allowed_cidrs if c.strip())
        trusted = frozenset(_origin(httpx.URL(u)) for u in trusted_urls if u)
        return cls(deny_private=deny_private, allowed=allowed, trusted=trusted)

    def refusal(self, address: IPAddress) -> str | None:
        """Why the policy refuses ``address``; None when it may be called."""
        if any(address in network for network in self.allowed):
            return None
        reason = never_allowed(address)
        if reason is None and self.deny_private and is_private(address):
            reason = "private"
        return reason

    async def check(self, url: httpx.URL) -> None:
        """Resolve the URL's host and refuse it when any address it resolves to is refused."""
        host, port = _origin(url)
        if (host, port) in self.trusted:
            return
        for address in await _addresses(host, port):
            reason = self.refusal(address)
            if reason is not None:
                raise EgressRefused(reason)


def _origin(url: httpx.URL) -> tuple[str, int]:
    return url.host.lower(), url.port or (443 if url.scheme == "https" else 80)


async def refused_url(policy: EgressPolicy, url: str) -> EgressRefused | None:
    """The refusal of ``url`` under ``policy``, or None — also when its host does not resolve
    (the call itself then fails as unreachable, with its own code)."""
    try:
        await policy.check(httpx.URL(url))
    except EgressRefused as exc:
        return exc
    except httpx.HTTPError:
        return None
    return None


async def _addresses(host: str, port: int) -> list[IPAddress]:
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        pass
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise httpx.ConnectError(f"could not resolve the host: {exc.strerror}") from exc
    return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]


class GuardedTransport(httpx.AsyncBaseTransport):
    """An httpx transport that checks the policy before every request it forwards."""

    def __init__(self, policy: EgressPolicy, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self._policy = policy
        self._inner = inner or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await self._policy.check(request.url)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()
