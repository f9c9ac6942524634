"""A WAHA server's URL written one way, so "one session name per server" holds however it was typed.

A session name is unique per WAHA server (``channel_sessions.base_url``, revision 0029):
replies and ``:connect`` act on the server by name, so two orgs with one name on one server
would send through (or rewire the webhook of) one number. The index compares text, and
``HTTP://WAHA.internal:80/``, ``http://waha.internal.`` and ``http://waha.internal`` are one
server. Every URL is stored in this form (the API's validators, revision 0039 for the rows
before it): scheme and host in lower case, no trailing dot, no default port, no trailing
slash, no fragment. The path and query stay: behind a proxy, ``/a`` and ``/b`` may be two servers.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit, urlunsplit

DEFAULT_PORTS: Final = {"http": 80, "https": 443}


def canonical_server_url(url: str) -> str:
    """``url`` in its one stored form (``ValueError`` for a port that is not a number)."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").rstrip(".")
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    port = parts.port
    netloc = host if port is None or port == DEFAULT_PORTS.get(scheme) else f"{host}:{port}"
    return urlunsplit((scheme, netloc, parts.path.rstrip("/"), parts.query, ""))
