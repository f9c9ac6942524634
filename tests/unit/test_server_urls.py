"""One WAHA server, one stored URL: the per-server session-name check compares text."""

from __future__ import annotations

import pytest

from switchboard.server_urls import canonical_server_url


@pytest.mark.parametrize(
    "typed",
    [
        "http://waha.internal:3000",
        "HTTP://WAHA.Internal:3000/",
        "http://waha.internal.:3000",
        "  http://waha.internal:3000//  ",
        "http://waha.internal:3000#dashboard",
    ],
)
def test_one_server_written_many_ways_is_stored_one_way(typed: str) -> None:
    assert canonical_server_url(typed) == "http://waha.internal:3000"


@pytest.mark.parametrize(
    ("typed", "stored"),
    [
        ("http://waha.internal:80/", "http://waha.internal"),
        ("https://waha.example:443", "https://waha.example"),
        ("https://waha.example:80", "https://waha.example:80"),  # not https's default
        ("https://proxy.example/waha-a/", "https://proxy.example/waha-a"),  # behind a proxy, paths differ
        ("http://[2001:DB8::1]:3000/", "http://[2001:db8::1]:3000"),
    ],
)
def test_default_ports_go_and_paths_stay(typed: str, stored: str) -> None:
    assert canonical_server_url(typed) == stored


def test_a_port_that_is_not_a_number_is_refused() -> None:
    with pytest.raises(ValueError):
        canonical_server_url("http://waha.internal:http")
