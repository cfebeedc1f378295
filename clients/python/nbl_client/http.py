"""The HTTP layer of the client (and so of `nbl submit`, `nbl wait`, ...): what is worth a retry, and for how long.

- 429, 502, 503, 504: the API (or its proxy) is busy or its database is down; wait as long as its
  Retry-After says (else back off), until the caller's deadline.
- A connection that fails (refused, reset, timed out): back off and retry, but give up once the
  API has been unreachable for `connect_timeout` seconds in a row, naming the URL.
- Anything else is the answer: JSON on 2xx/3xx, ApiError on 4xx and other 5xx.

Each retry is announced on stderr (at most every WARN_EVERY_S for the same cause), even under
`--quiet`, so a client never waits silently. Retrying a POST is safe: the caller sends an
Idempotency-Key, so the same request gives the same job.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

RETRY_STATUSES = frozenset({429, 502, 503, 504})
MAX_DELAY_S = 60.0  # longest single wait, whatever Retry-After says
WARN_EVERY_S = 30.0


class ApiError(Exception):
    """The API refused the request (a 4xx, or a 5xx not worth a retry)."""

    def __init__(self, status: int, problem: dict):
        self.status, self.problem = status, problem
        super().__init__(format_problem(status, problem))


class Unavailable(Exception):
    """Gave up: the API stayed unreachable for connect_timeout, or busy until the deadline."""


def format_problem(status: int, problem: dict) -> str:
    text = f"{problem.get('title', 'error')} ({status})"
    if problem.get("detail"):
        text += f": {problem['detail']}"
    for e in (problem.get("errors") or [])[1:]:
        text += f"\n  {'.'.join(str(x) for x in e.get('loc', []))}: {e.get('msg')}"
    return text


def check_api_url(url: str) -> str:
    """The URL without its trailing '/'; ValueError unless it is http(s)://HOST[...]."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"the API URL must start with http:// or https:// and name a host, got {url[:100]!r}")
    return url.rstrip("/")


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """Retry-After as seconds from now (RFC 9110: delay-seconds or an HTTP-date); None if absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return max(when - (time.time() if now is None else now), 0.0)


def backoff_s(attempt: int) -> float:
    return min(0.5 * 2**attempt, 15.0)


class Api:
    """`Api(url, key).request("GET", "/v1/jobs/...")` -> the JSON body, retried as above."""

    def __init__(
        self,
        url: str,
        key: str,
        *,
        connect_timeout: float = 60.0,
        warn: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        import httpx

        if connect_timeout <= 0:
            raise ValueError("--connect-timeout must be positive")
        self.url, self.connect_timeout = check_api_url(url), connect_timeout
        self._warn = warn or (lambda line: print(line, file=sys.stderr, flush=True))
        self._clock, self._sleep = clock, sleep
        self._last_warning: tuple[str, float] | None = None
        timeout = httpx.Timeout(30.0, connect=min(10.0, connect_timeout))
        self._http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=timeout)

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc) -> None:
        self._http.close()

    def request(self, method: str, path: str, *, deadline: float | None = None, **kwargs) -> dict:
        """The JSON answer. Raises ApiError (refused) or Unavailable (gave up; `deadline` is a
        time.monotonic() value, None for no limit on busy answers)."""
        return _json_or_error(self.send(method, path, deadline=deadline, **kwargs))

    def stream(self, path: str, *, deadline: float | None = None, headers: dict | None = None, **kwargs):
        """GET with the body unread (`iter_bytes()`), retried as `request` is until it answers; the
        caller closes it. ApiError on a 4xx/5xx answer."""
        resp = self.send("GET", path, deadline=deadline, stream=True, headers=headers, **kwargs)
        if resp.status_code >= 400:
            resp.read()
            resp.close()
            _json_or_error(resp)
        return resp

    def send(self, method: str, path: str, *, deadline: float | None = None, stream: bool = False, **kwargs):
        """The first answer not worth a retry (the httpx Response; with `stream`, its body unread)."""
        import httpx

        down_since, attempt = None, 0
        while True:
            try:
                resp = self._http.send(self._http.build_request(method, path, **kwargs), stream=stream)
            except httpx.TransportError as e:
                now = self._clock()
                down_since = now if down_since is None else down_since
                left = self.connect_timeout - (now - down_since)
                cause = f"cannot reach the API at {self.url} ({type(e).__name__}: {e})"
                if left <= 0:
                    raise Unavailable(f"{cause}; gave up after --connect-timeout {self.connect_timeout:g} s") from None
                delay = min(backoff_s(attempt), left)
            else:
                if resp.status_code not in RETRY_STATUSES:
                    return resp
                if stream:
                    resp.read()
                    resp.close()
                down_since, now = None, self._clock()
                cause = f"the API at {self.url} answered {resp.status_code} ({_title(resp)})"
                hinted = retry_after_s(resp.headers.get("retry-after"))
                delay = min(backoff_s(attempt) if hinted is None else hinted, MAX_DELAY_S)
            if deadline is not None:
                if deadline - now <= 0:
                    raise Unavailable(f"{cause}; gave up at the --timeout")
                delay = min(delay, deadline - now)
            self._announce(cause, delay, now)
            self._sleep(delay)
            attempt += 1

    def warn_once(self, line: str) -> None:
        """Says `line` on stderr (or to `warn`) the first time only."""
        said = self.__dict__.setdefault("_said", set())
        if line not in said:
            said.add(line)
            self._warn(line)

    def _announce(self, cause: str, delay: float, now: float) -> None:
        if self._last_warning is None or self._last_warning[0] != cause or now - self._last_warning[1] >= WARN_EVERY_S:
            self._warn(f"nbl: {cause}; retrying in {delay:.1f} s")
            self._last_warning = (cause, now)


def _title(resp) -> str:
    try:
        return str(resp.json().get("title") or resp.reason_phrase)
    except (ValueError, AttributeError):
        return resp.reason_phrase


def _json_or_error(resp) -> dict:
    try:
        body = resp.json()
    except (ValueError, RecursionError):  # not JSON, or nested past the decoder's bound: not an answer we read
        body = {"title": resp.reason_phrase, "detail": resp.text[:500]}
    if resp.status_code >= 400:
        raise ApiError(resp.status_code, body if isinstance(body, dict) else {"detail": str(body)[:500]})
    return body
