"""Which webhook URLs pass, as pure functions with a fake resolver (no network): the syntax, every
address public (IPv4 hidden in IPv6 included), and the operator's allowlist."""

from __future__ import annotations

import ipaddress

import pytest

from service.webhooks.urls import WebhookUrlError, check_syntax, is_public, parse_networks, resolve_checked

PUBLIC = "93.184.215.14"


def dns(table: dict[str, list[str]]):
    def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise OSError("Name or service not known")
        return table[host]

    return resolve


@pytest.mark.parametrize("url", [
    "ftp://hooks.example.com/x", "file:///etc/passwd", "gopher://x", "javascript:alert(1)", "//hooks.example.com/x",
    "hooks.example.com/x", "http:///x", "https://user:pw@hooks.example.com/", "https://user@hooks.example.com/",
    "https://hooks.example.com/x#frag", "https://hooks.example.com/x#", "https://hooks.example.com:0/",
    "https://hooks.example.com:99999/", "https://hooks.example.com:-1/", "https://hооks.example.com/",
    "https://hooks.example.com/\x00", "https://hooks.example.com/a b", "https://hooks.example.com/\n",
    "https://hooks.example.com/" + "a" * 2100, "https://[::1/", "http://a@b@c/",
])
def test_malformed_urls(url):
    with pytest.raises(WebhookUrlError):
        check_syntax(url)


@pytest.mark.parametrize("address", [
    "127.0.0.1", "127.255.255.254", "10.1.2.3", "172.31.0.1", "192.168.0.1", "100.64.0.1", "169.254.169.254",
    "0.0.0.0", "255.255.255.255", "224.0.0.251", "240.0.0.1", "198.18.0.1", "192.0.2.1",
    "::1", "::", "fe80::1", "fc00::1", "fd12:3456::1", "ff02::1", "2001:db8::1",
    "::ffff:127.0.0.1", "::ffff:169.254.169.254", "64:ff9b::7f00:1", "2002:7f00:1::1",
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, carrying 127.0.0.1
])
def test_private_and_reserved_addresses_are_not_public(address):
    assert not is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", [PUBLIC, "8.8.8.8", "2606:4700:4700::1111", "64:ff9b::808:808"])
def test_public_addresses(address):
    assert is_public(ipaddress.ip_address(address))


def test_every_resolved_address_must_pass():
    resolve = dns({"hooks.example.com": [PUBLIC], "mixed.example.com": [PUBLIC, "10.0.0.5"],
                   "rebind.example.com": ["169.254.169.254"], "v6.example.com": ["2606:4700:4700::1111"],
                   "zone.example.com": ["fe80::1%eth0"], "empty.example.com": []})
    assert resolve_checked("https://hooks.example.com/x?a=1", resolve=resolve) == [ipaddress.ip_address(PUBLIC)]
    assert resolve_checked("https://v6.example.com:8443/", resolve=resolve)
    for url in ("https://mixed.example.com/", "http://rebind.example.com/", "http://zone.example.com/",
                "http://empty.example.com/", "http://unknown.example.com/"):
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
    for url in ("http://2130706433/", "http://0x7f000001/", "http://0177.0.0.1/", "http://127.1/", "http://[::1]/",
                "http://localhost/"):
        with pytest.raises(WebhookUrlError, match="private or reserved"):
            resolve_checked(url)
