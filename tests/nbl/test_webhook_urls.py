"""Which webhook URLs pass, as pure functions with a fake resolver (no network): the syntax, every
address public (IPv4 hidden in IPv6 included), and the operator's allowlist."""

from __future__ import annotations

import ipaddress

import pytest

from nbl.webhook_urls import WebhookUrlError, check_syntax, is_public, parse_networks, resolve_checked

PUBLIC = "93.184.215.14"


def dns(table: dict[str, list[str]]):
    def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise OSError("Name or service not known")
        return table[host]

    return resolve


@pytest.mark.parametrize(
    "url",
    [
        "ftp://hooks.example.com/x",
        "file:///etc/passwd",
        "gopher://x",
        "javascript:alert(1)",
        "//hooks.example.com/x",
        "hooks.example.com/x",
        "http:///x",
        "https://user:pw@hooks.example.com/",
        "https://user@hooks.example.com/",
        "https://hooks.example.com/x#frag",
        "https://hooks.example.com/x#",
        "https://hooks.example.com:0/",
        "https://hooks.example.com:99999/",
        "https://hooks.example.com:-1/",
        "https://hооks.example.com/",
        "https://hooks.example.com/\x00",
        "https://hooks.example.com/a b",
        "https://hooks.example.com/\n",
        "https://hooks.example.com/" + "a" * 2100,
        "https://[::1/",
        "http://a@b@c/",
    ],
)
def test_malformed_urls(url):
    with pytest.raises(WebhookUrlError):
        check_syntax(url)


# Every address a webhook must not reach, by kind. Python's is_global calls those marked * global.
NOT_PUBLIC = [
    # IPv4: this host, private, shared (CGNAT), loopback, link-local (cloud metadata), IETF protocol
    # assignments (192.0.0.8* is the dummy address, .9* and .10* anycast), documentation, the 6to4
    # relay, benchmarking, multicast, reserved, broadcast
    "0.0.0.0",
    "0.1.2.3",
    "10.1.2.3",
    "100.64.0.1",
    "127.0.0.1",
    "127.255.255.254",
    "169.254.169.254",
    "172.31.0.1",
    "192.0.0.1",
    "192.0.0.8",
    "192.0.0.9",
    "192.0.0.10",
    "192.0.0.170",
    "192.0.2.1",
    "192.88.99.1",
    "192.168.0.1",
    "198.18.0.1",
    "198.51.100.7",
    "203.0.113.9",
    "224.0.0.251",
    "239.255.255.250",
    "240.0.0.1",
    "255.255.255.255",
    # IPv6 of its own: unspecified, loopback, discard, documentation (3fff::/20*), ULA, link-local,
    # site-local (fec0::/10*, deprecated), multicast, SRv6 SIDs (5f00::/16*), outside 2000::/3 (4000::1*)
    "::",
    "::1",
    "100::1",
    "2001:db8::1",
    "3fff::1",
    "fc00::1",
    "fd12:3456::1",
    "fe80::1",
    "fec0::1",
    "feff::1",
    "ff02::1",
    "5f00::1",
    "4000::1",
    # IPv4 carried in IPv6: compatible (::/96*, deprecated) whatever it carries, mapped, translated
    # (::ffff:0:0:0/96*), NAT64 well-known prefix, NAT64 local-use prefix (64:ff9b:1::/48*) whatever
    # it carries, 6to4, Teredo (2001::/32, the IETF block 2001::/23)
    "::7f00:1",
    "::a00:1",
    "::808:808",
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "::ffff:10.0.0.1",
    "::ffff:0:7f00:1",
    "::ffff:0:808:808",
    "64:ff9b::7f00:1",
    "64:ff9b::a9fe:a9fe",
    "64:ff9b:1::7f00:1",
    "64:ff9b:1::808:808",
    "2002:7f00:1::1",
    "2002:a00:1::1",
    "2002:c000:0008::1",
    "2001:0:4136:e378:8000:63bf:80ff:fffe",
    "2001:0:4136:e378:8000:63bf:f7f7:f7f7",
    "2001:2::1",
    "2001:20::1",
]
PUBLIC_ADDRESSES = [
    PUBLIC,
    "8.8.8.8",
    "1.1.1.1",
    "192.0.1.1",
    "192.0.3.1",
    "198.17.255.1",
    "223.255.255.1",
    "2606:4700:4700::1111",
    "2a00:1450:4001:80b::200e",
    "2001:200::1",
    "2620:fe::fe",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",
    "2002:808:808::1",  # a public IPv4 behind mapping, NAT64, 6to4
]


@pytest.mark.parametrize("address", NOT_PUBLIC)
def test_private_and_reserved_addresses_are_not_public(address):
    assert not is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", PUBLIC_ADDRESSES)
def test_public_addresses(address):
    assert is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", NOT_PUBLIC)
def test_a_literal_url_of_a_non_public_address_is_refused_with_the_system_resolver(address):
    """What the submit check and the deliverer do with a URL naming the address itself (no DNS)."""
    host = f"[{address}]" if ":" in address else address
    with pytest.raises(WebhookUrlError, match="private or reserved"):
        resolve_checked(f"http://{host}:8080/hook")


@pytest.mark.parametrize("address", PUBLIC_ADDRESSES)
def test_a_literal_url_of_a_public_address_passes(address):
    host = f"[{address}]" if ":" in address else address
    assert resolve_checked(f"https://{host}/hook") == [ipaddress.ip_address(address)]


def test_every_resolved_address_must_pass():
    resolve = dns(
        {
            "hooks.example.com": [PUBLIC],
            "mixed.example.com": [PUBLIC, "10.0.0.5"],
            "rebind.example.com": ["169.254.169.254"],
            "v6.example.com": ["2606:4700:4700::1111"],
            "zone.example.com": ["fe80::1%eth0"],
            "empty.example.com": [],
        }
    )
    assert resolve_checked("https://hooks.example.com/x?a=1", resolve=resolve) == [ipaddress.ip_address(PUBLIC)]
    assert resolve_checked("https://v6.example.com:8443/", resolve=resolve)
    for url in (
        "https://mixed.example.com/",
        "http://rebind.example.com/",
        "http://zone.example.com/",
        "http://empty.example.com/",
        "http://unknown.example.com/",
    ):
        with pytest.raises(WebhookUrlError):
            resolve_checked(url, resolve=resolve)


def test_the_allowlist_admits_exactly_its_networks():
    resolve = dns({"ci.internal": ["10.20.0.7"], "other.internal": ["10.30.0.7"], "meta": ["169.254.169.254"]})
    allow = parse_networks("10.20.0.0/16, 127.0.0.1")
    assert resolve_checked("http://ci.internal/hook", allow, resolve)
    assert resolve_checked("http://127.0.0.1:8080/hook", allow, dns({"127.0.0.1": ["127.0.0.1"]}))
    for url in ("http://other.internal/", "http://meta/"):
        with pytest.raises(WebhookUrlError):
            resolve_checked(url, allow, resolve)
    with pytest.raises(ValueError):
        parse_networks("10.0.0.0/33")


def test_literal_tricks_resolve_to_loopback_with_the_system_resolver():
    """Decimal, hex, octal and short forms of 127.0.0.1 are what getaddrinfo makes of them."""
    for url in (
        "http://2130706433/",
        "http://0x7f000001/",
        "http://0177.0.0.1/",
        "http://127.1/",
        "http://[::1]/",
        "http://localhost/",
    ):
        with pytest.raises(WebhookUrlError, match="private or reserved"):
            resolve_checked(url)
