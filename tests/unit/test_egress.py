"""The egress policy: which resolved addresses a tenant's URL may lead to."""

from __future__ import annotations

import ipaddress

import httpx
import pytest

from switchboard.egress import EgressPolicy, EgressRefused, GuardedTransport, refuse_literal_address
from switchboard.settings import EgressSettings

NEVER = ["169.254.169.254", "::ffff:169.254.169.254", "fe80::1", "0.0.0.0", "::", "224.0.0.1", "240.0.0.1"]
PRIVATE = ["127.0.0.1", "::1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "fd00::1", "100.64.0.1", "::ffff:10.0.0.1"]
PUBLIC = ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"]


@pytest.mark.parametrize("address", NEVER)
def test_link_local_unspecified_multicast_and_reserved_are_never_allowed(address: str) -> None:
    for policy in (EgressPolicy(), EgressPolicy(deny_private=True)):
        assert policy.refusal(ipaddress.ip_address(address)) is not None
    with pytest.raises(ValueError, match="not allowed"):
        refuse_literal_address(f"[{address}]" if ":" in address else address)


@pytest.mark.parametrize("address", PRIVATE)
def test_private_addresses_are_allowed_by_default_and_refused_when_denied(address: str) -> None:
    ip = ipaddress.ip_address(address)
    assert EgressPolicy().refusal(ip) is None
    assert EgressPolicy(deny_private=True).refusal(ip) == "private"
    refuse_literal_address(address)  # saved URLs may name them: the process's policy decides


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_allowed(address: str) -> None:
    assert EgressPolicy(deny_private=True).refusal(ipaddress.ip_address(address)) is None


def test_listed_networks_are_allowed_even_when_private_is_denied() -> None:
    policy = EgressSettings(deny_private=True, allowed_cidrs=" 10.0.0.0/8 ,fd00::/8").policy()
    assert policy.refusal(ipaddress.ip_address("10.9.8.7")) is None
    assert policy.refusal(ipaddress.ip_address("fd00::5")) is None
    assert policy.refusal(ipaddress.ip_address("192.168.0.1")) == "private"


def test_a_bad_cidr_is_refused_when_the_settings_load() -> None:
    with pytest.raises(ValueError, match="SWITCHBOARD_EGRESS_ALLOWED_CIDRS"):
        EgressSettings(allowed_cidrs="10.0.0.0/8,not-a-network")


async def test_host_names_are_checked_by_what_they_resolve_to_and_operator_urls_are_trusted() -> None:
    policy = EgressPolicy.build(deny_private=True, allowed_cidrs=(), trusted_urls=("http://localhost:3000",))
    with pytest.raises(EgressRefused) as refused:
        await policy.check(httpx.URL("http://localhost:8080/api/sendText"))  # resolves to loopback
    assert refused.value.code == "egress_refused" and "127.0.0.1" not in str(refused.value)
    await policy.check(httpx.URL("http://localhost:3000/api/sendText"))  # the operator's own WAHA


async def test_the_guarded_transport_refuses_before_anything_is_sent() -> None:
    sent: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200)

    transport = GuardedTransport(EgressPolicy(), httpx.MockTransport(record))
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(EgressRefused):
            await client.post("http://169.254.169.254/latest/meta-data", content=b"{}")
        assert (await client.get("http://93.184.216.34/")).status_code == 200
    assert [str(r.url) for r in sent] == ["http://93.184.216.34/"]
