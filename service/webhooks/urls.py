"""Which URLs a webhook may be sent to: pure functions, used at submit time (422) and again at
delivery time (DNS can change between the two: rebinding).

A webhook URL is `http(s)://host[:port]/path?query` with an ASCII host (IDNs in punycode, so no
look-alikes), no credentials and no fragment. Every address the host resolves to must be public:
loopback, RFC 1918, CGNAT, link-local (the cloud metadata service at 169.254.169.254), ULA,
multicast, reserved and unspecified addresses are refused, including IPv4 hidden inside IPv6
(mapped, 6to4, Teredo, NAT64). An allowlist of networks (NBL_WEBHOOK_ALLOWLIST) lets an operator
reach a private receiver on purpose.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], list[str]]

MAX_URL_LENGTH = 2048
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class WebhookUrlError(ValueError):
    """A webhook URL that is malformed or points somewhere we will not send to."""


def parse_networks(text: str) -> tuple[Network, ...]:
    """`"127.0.0.1, 10.0.0.0/8"` -> networks; raises ValueError on a bad entry."""
    return tuple(ipaddress.ip_network(part.strip(), strict=False) for part in text.split(",") if part.strip())


def check_syntax(url: str) -> str:
    """The URL's shape alone (no DNS): scheme, host, no credentials, no fragment, ASCII, bounded."""
    if len(url) > MAX_URL_LENGTH:
        raise WebhookUrlError(f"webhook_url is longer than {MAX_URL_LENGTH} characters")
    if not url.isascii() or any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7f for c in url):
        raise WebhookUrlError("webhook_url must be ASCII without spaces or control characters "
                              "(write international host names in punycode)")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise WebhookUrlError(f"webhook_url is not a valid URL: {e}") from None
    if parts.scheme not in ("http", "https"):
        raise WebhookUrlError("webhook_url must be an http:// or https:// URL")
    if not parts.hostname:
        raise WebhookUrlError("webhook_url has no host")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise WebhookUrlError("webhook_url must not carry credentials (user:password@); "
                              "verify the webhook signature instead")
    if parts.fragment or url.endswith("#"):
        raise WebhookUrlError("webhook_url must not have a #fragment")
    if port == 0:
        raise WebhookUrlError("webhook_url has port 0")
    return url


def embedded_ipv4(ip: IPAddress) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address carries (and may be routed to)."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return []
    found = [a for a in (ip.ipv4_mapped, ip.sixtofour) if a is not None]
    if ip.teredo:
        found.append(ip.teredo[1])
    if ip in _NAT64:
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return found


def is_public(ip: IPAddress) -> bool:
    """Globally routable unicast, and so is any IPv4 address hidden inside it."""
    return all(a.is_global and not a.is_multicast for a in (ip, *embedded_ipv4(ip)))


def allowed(ip: IPAddress, allowlist: Iterable[Network]) -> bool:
    return is_public(ip) or any(ip in net for net in allowlist if ip.version == net.version)


def system_resolver(host: str, port: int) -> list[str]:
    """All addresses of `host` (an IP literal, including forms like 2130706433, resolves to itself)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return sorted({info[4][0] for info in infos})


def resolve_checked(url: str, allowlist: Iterable[Network] = (), resolve: Resolver = system_resolver,
                    ) -> list[IPAddress]:
    """The addresses `url` may be sent to: all of them public or allowlisted, or WebhookUrlError.

    Every address must pass, not just one: the client might connect to any of them."""
    check_syntax(url)
    parts = urlsplit(url)
    host = parts.hostname
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        addresses = [ipaddress.ip_address(a.split("%", 1)[0]) for a in resolve(host, port)]
    except (OSError, UnicodeError, ValueError) as e:
        raise WebhookUrlError(f"webhook_url host {host!r} does not resolve ({type(e).__name__})") from None
    if not addresses:
        raise WebhookUrlError(f"webhook_url host {host!r} does not resolve")
    allowlist = tuple(allowlist)
    refused = [a for a in addresses if not allowed(a, allowlist)]
    if refused:
        raise WebhookUrlError(f"webhook_url host {host!r} resolves to a private or reserved address ({refused[0]}); "
                              "webhooks go to public addresses only unless NBL_WEBHOOK_ALLOWLIST names it")
    return addresses
