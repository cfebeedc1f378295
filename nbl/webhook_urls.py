"""Which URLs a webhook may be sent to: pure functions, used at submit time (422) and again at
delivery time (DNS can change between the two: rebinding).

A webhook URL is `http(s)://host[:port]/path?query` with an ASCII host (IDNs in punycode, so no
look-alikes), no credentials and no fragment. Every address the host resolves to must be public:
loopback, RFC 1918, CGNAT, link-local (the cloud metadata service at 169.254.169.254), ULA,
site-local, multicast, documentation, reserved and unspecified addresses are refused. IPv4 inside
IPv6 passes only when it is public and carried by a form that routes to it (mapped, NAT64's
well-known prefix, 6to4); compatible, translated, local-use NAT64 and Teredo addresses are refused
whatever they carry. `is_public` alone decides, at submit and at delivery. It does not trust Python's
`is_global`, which calls ::7f00:1, fec0::1 or 192.0.0.8 global: an address passes only when it is
outside every special-purpose block below (IANA's registries) and, for IPv6, inside 2000::/3, the
global unicast space. An allowlist of networks (NBL_WEBHOOK_ALLOWLIST) lets an operator reach a
private receiver on purpose.
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


def _nets(*cidrs: str) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(c) for c in cidrs)


# IPv4 blocks that are never a webhook receiver, whatever Python says of them.
_V4_NOT_PUBLIC = _nets(
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",  # IETF protocol assignments: the dummy address 192.0.0.8, anycast .9 and .10, ...
    "192.0.2.0/24",
    "192.88.99.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",  # multicast; reserved, with the broadcast address
)
# Global unicast: ULA fc00::/7, link-local fe80::/10, site-local fec0::/10, multicast ff00::/8, ::/96, ... lie outside.
_V6_GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")
_V6_NOT_PUBLIC = _nets(
    "2001::/23",  # IETF protocol assignments: Teredo 2001::/32, benchmarking, ORCHID, ...
    "2001:db8::/32",
    "3fff::/20",  # documentation
)
# IPv6 forms whose packets go to the IPv4 address in their last 32 bits: mapped, and the NAT64
# well-known prefix. Compatible (::/96), translated (::ffff:0:0:0/96) and local-use NAT64
# (64:ff9b:1::/48) are refused whatever they carry: they lie outside 2000::/3.
_V6_CARRIERS = _nets("::ffff:0:0/96", "64:ff9b::/96")


class WebhookUrlError(ValueError):
    """A webhook URL that is malformed or points somewhere we will not send to."""


def parse_networks(text: str) -> tuple[Network, ...]:
    """`"127.0.0.1, 10.0.0.0/8"` -> networks; raises ValueError on a bad entry."""
    return tuple(ipaddress.ip_network(part.strip(), strict=False) for part in text.split(",") if part.strip())


def check_syntax(url: str) -> str:
    """The URL's shape alone (no DNS): scheme, host, no credentials, no fragment, ASCII, bounded."""
    if len(url) > MAX_URL_LENGTH:
        raise WebhookUrlError(f"webhook_url is longer than {MAX_URL_LENGTH} characters")
    if not url.isascii() or any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise WebhookUrlError(
            "webhook_url must be ASCII without spaces or control characters "
            "(write international host names in punycode)"
        )
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
        raise WebhookUrlError(
            "webhook_url must not carry credentials (user:password@); verify the webhook signature instead"
        )
    if parts.fragment or url.endswith("#"):
        raise WebhookUrlError("webhook_url must not have a #fragment")
    if port == 0:
        raise WebhookUrlError("webhook_url has port 0")
    return url


def _public_v4(ip: ipaddress.IPv4Address) -> bool:
    return ip.is_global and not any(ip in net for net in _V4_NOT_PUBLIC)


def is_public(ip: IPAddress) -> bool:
    """Whether a webhook may go to `ip` without the operator's allowlist: the one decision, made at
    submit (a literal or resolved host) and at delivery (the address connected to)."""
    if isinstance(ip, ipaddress.IPv4Address):
        return _public_v4(ip)
    for carrier in _V6_CARRIERS:
        if ip in carrier:
            return _public_v4(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    if ip not in _V6_GLOBAL_UNICAST or not ip.is_global or any(ip in net for net in _V6_NOT_PUBLIC):
        return False
    return ip.sixtofour is None or _public_v4(ip.sixtofour)  # 6to4 (2002::/16) routes to the IPv4 it carries


def allowed(ip: IPAddress, allowlist: Iterable[Network]) -> bool:
    return is_public(ip) or any(ip in net for net in allowlist if ip.version == net.version)


def system_resolver(host: str, port: int) -> list[str]:
    """All addresses of `host` (an IP literal, including forms like 2130706433, resolves to itself)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return sorted({info[4][0] for info in infos})


def resolve_checked(
    url: str,
    allowlist: Iterable[Network] = (),
    resolve: Resolver = system_resolver,
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
        raise WebhookUrlError(
            f"webhook_url host {host!r} resolves to a private or reserved address ({refused[0]}); "
            "webhooks go to public addresses only unless NBL_WEBHOOK_ALLOWLIST names it"
        )
    return addresses
