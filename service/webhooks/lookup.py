"""The webhook URL check at submit, under a deadline: a host whose name server never answers costs
the API one request's wait of `deadline_s`, not a threadpool thread for as long as getaddrinfo
likes (issue 24, red-team pass). As at delivery (post.py), the lookup runs in a daemon thread that
is abandoned at the deadline: getaddrinfo cannot be interrupted, and it ends on its own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from urllib.parse import urlsplit

from nbl.webhook_urls import (
    IPAddress,
    Network,
    Resolver,
    WebhookUrlError,
    check_syntax,
    resolve_checked,
    system_resolver,
)


def resolve_within(
    url: str, allowlist: Iterable[Network], deadline_s: float, resolve: Resolver = system_resolver
) -> list[IPAddress]:
    """resolve_checked(url, allowlist) within `deadline_s`, else WebhookUrlError."""
    check_syntax(url)  # a malformed URL is refused here, without a thread
    allowlist = tuple(allowlist)
    outcome: dict = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["addresses"] = resolve_checked(url, allowlist, resolve)
        except BaseException as e:  # noqa: BLE001 - handed to the waiting caller
            outcome["error"] = e
        finally:
            done.set()

    threading.Thread(target=run, name="nbl-webhook-lookup", daemon=True).start()
    if not done.wait(deadline_s):
        raise WebhookUrlError(f"webhook_url host {urlsplit(url).hostname!r} did not resolve within {deadline_s:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["addresses"]
