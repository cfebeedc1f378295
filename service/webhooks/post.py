"""One webhook POST under a hard total deadline: resolving the host, connecting, sending and reading
the answer's status line count together against Settings.webhook_timeout_s.

httpx's timeout bounds each read, not the request, so a receiver that trickles one header byte every
few seconds held a POST (and the loop that sent it) for as long as it liked (issue 24). Here the
POST is an asyncio task under `asyncio.wait_for`: at the deadline the task is cancelled, which
closes its socket. The host is resolved in a daemon thread that is abandoned at the deadline
(getaddrinfo cannot be interrupted; it ends on its own).

The connection goes to the address that was checked (no DNS rebinding between the check and the
connect), redirects are not followed and proxies from the environment are ignored.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx

from nbl.webhook_urls import IPAddress, Network, Resolver, WebhookUrlError, resolve_checked
from service.webhooks.signing import signed_headers

USER_AGENT = "nbl-service-webhooks/1"
T = TypeVar("T")


def client(deadline_s: float) -> httpx.AsyncClient:
    """The client of one delivery pass: no connection kept between POSTs (each goes to an address
    checked just before), no redirects, no proxies from the environment."""
    return httpx.AsyncClient(
        timeout=deadline_s,
        follow_redirects=False,
        trust_env=False,
        limits=httpx.Limits(max_keepalive_connections=0),
        headers={"user-agent": USER_AGENT},
    )


async def attempt(
    http: httpx.AsyncClient,
    url: str,
    secret: str,
    msg_id: str,
    body: str,
    *,
    deadline_s: float,
    allowlist: Iterable[Network],
    resolve: Resolver,
) -> tuple[int | None, str | None]:
    """Resolve, check and POST within `deadline_s`: (status code or None, error or None)."""

    async def resolve_and_post() -> int:
        addresses = await _in_daemon_thread(resolve_checked, url, tuple(allowlist), resolve)
        return await _post(http, url, addresses[0], secret, msg_id, body)

    try:
        status = await asyncio.wait_for(resolve_and_post(), deadline_s)
    except asyncio.TimeoutError:  # TimeoutError since 3.11; a class of its own on 3.10
        return None, f"no answer within {deadline_s:g} s (resolve, connect, send and the status line, together)"
    except WebhookUrlError as e:
        return None, f"refused: {e}"
    except Exception as e:  # noqa: BLE001 - any failure is a recorded, retried attempt, never a lost row
        return None, f"{type(e).__name__}: {e}"[:500]
    return status, None if 200 <= status < 300 else f"HTTP {status}"


async def _in_daemon_thread(fn: Callable[..., T], *args) -> T:
    """`fn(*args)` in a thread of its own that the caller may abandon (at its deadline): a daemon,
    so neither the event loop's end nor the process's exit waits for it, as they would for an
    executor's thread stuck in getaddrinfo."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result, error) -> None:
        if done.done():  # given up meanwhile
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)

    def run() -> None:
        try:
            outcome = (fn(*args), None)
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting task
            outcome = (None, e)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:
            pass  # the loop has closed: its caller gave up long ago

    threading.Thread(target=run, name="nbl-webhook-resolve", daemon=True).start()
    return await done


async def _post(http: httpx.AsyncClient, url: str, address: IPAddress, secret: str, msg_id: str, body: str) -> int:
    """POST to the checked address, keeping the URL's host for the Host header and TLS (SNI and
    certificate check). Only the status is read, never a body the receiver may make huge."""
    parts = urlsplit(url)
    netloc = f"[{address}]" if address.version == 6 else str(address)
    if parts.port:
        netloc += f":{parts.port}"
    target = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
    headers = signed_headers(secret, msg_id, int(time.time()), body) | {"host": parts.netloc}
    extensions = {"sni_hostname": parts.hostname} if parts.scheme == "https" else {}
    async with http.stream("POST", target, content=body.encode(), headers=headers, extensions=extensions) as resp:
        return resp.status_code
