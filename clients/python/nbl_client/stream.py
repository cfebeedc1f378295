"""Following a job over `GET /v1/jobs/{id}/events/stream` (Server-Sent Events) instead of polling.

`follow(api, job_id, after, deadline)` yields ("event", Event), ("job", {status, stage, progress,
stage_progress, eta_seconds}), ("heartbeat", None) when the server says it is alive, and finally
("end", {...}) once the job has ended. When the server
closes a stream without `end` (it does after NBL_STREAM_MAX_S) or the connection breaks, it
reconnects with `Last-Event-ID`, so no event is lost or repeated. A server without the stream
(an older one: 404/405 on the route) raises StreamUnavailable, and the caller polls instead.

A stream that keeps failing also raises StreamUnavailable, so the caller polls within a bounded
time (GIVE_UP_S, then one last attempt's connect and read timeouts, at most) whatever the fault: an
attempt fails when it breaks (reset, silent past READ_TIMEOUT_S) before a new event, closes having
sent no data, or answers 5xx (each attempt's HTTP retries of a busy or unreachable API stop at
GIVE_UP_S from the first failure: they would otherwise retry for ever when no deadline is given).
MAX_BROKEN failures in a row, or failing for GIVE_UP_S, is the end of streaming; failed attempts
are spaced by the HTTP layer's backoff.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator

from .http import Api, ApiError, Unavailable, backoff_s
from .models import Event

READ_TIMEOUT_S = 45.0  # the server sends a heartbeat after 15 s of silence
MAX_BROKEN = 5  # failed streams in a row: give up on streaming
GIVE_UP_S = 30.0  # or failing for this long (each attempt's HTTP retries included): give up on streaming


class StreamUnavailable(Exception):
    """This server (or a proxy in front of it) does not stream events: poll instead."""


def parse(lines: Iterable[str]) -> Iterator[tuple[str, str, str | None]]:
    """(event type, data, id) per event of a text/event-stream (WHATWG HTML, "event stream
    interpretation"); a comment is ("comment", its text, None), retry lines are skipped, and an event
    without data is not dispatched."""
    kind, data, ident = "", [], None
    for line in lines:
        if line == "":
            if data:
                yield kind or "message", "\n".join(data), ident
            kind, data, ident = "", [], None
            continue
        if line.startswith(":"):
            yield "comment", line[1:].strip(), None
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            kind = value
        elif field == "data":
            data.append(value)
        elif field == "id" and "\0" not in value:
            ident = value


def follow(
    api: Api, job_id: str, after: int | None, deadline: float | None, clock=time.monotonic, sleep=time.sleep
) -> Iterator[tuple[str, object]]:
    """The stream's items until the job ends (module docstring). Raises StreamUnavailable (also once
    the stream has kept failing: module docstring), ApiError, or TimeoutError once `deadline`
    (monotonic) passes."""
    import httpx

    broken, failing_since = 0, None
    while True:
        now = clock()
        left = None if deadline is None else deadline - now
        if left is not None and left <= 0:
            raise TimeoutError(job_id)
        read = READ_TIMEOUT_S if left is None else max(min(READ_TIMEOUT_S, left), 0.05)
        # the HTTP layer retries a busy or unreachable API until this attempt's deadline, not for ever
        give_up = (now if failing_since is None else failing_since) + GIVE_UP_S
        headers = {"Accept": "text/event-stream"} | ({} if after is None else {"Last-Event-ID": str(after)})
        got_event = got_data = False
        try:
            resp = api.stream(
                f"/v1/jobs/{job_id}/events/stream",
                deadline=give_up if deadline is None else min(give_up, deadline),
                headers=headers,
                timeout=httpx.Timeout(read, connect=10.0),
            )
        except ApiError as e:
            if e.status in (404, 405, 406, 501) or e.status >= 500:  # the job was read just before: the stream fails
                raise StreamUnavailable(str(e)) from None
            raise
        except Unavailable as e:
            if deadline is not None and clock() >= deadline:
                raise TimeoutError(job_id) from None
            raise StreamUnavailable(str(e)) from None
        else:
            if not resp.headers.get("content-type", "").startswith("text/event-stream"):
                resp.close()
                raise StreamUnavailable(f"the events stream answered {resp.headers.get('content-type')!r}")
            clean = False
            try:
                for kind, data, ident in parse(resp.iter_lines()):
                    if kind == "message":
                        event = Event.model_validate(json.loads(data))
                        after = event.id if ident is None else int(ident)
                        got_event = got_data = True
                        yield "event", event
                    elif kind == "comment":
                        if data == "heartbeat":
                            yield "heartbeat", None
                    elif kind in ("job", "end"):
                        got_data = True
                        yield kind, json.loads(data)
                        if kind == "end":
                            return
                clean = True
            except httpx.TimeoutException:  # silent past READ_TIMEOUT_S: three heartbeats missed
                if deadline is not None and clock() >= deadline:
                    raise TimeoutError(job_id) from None
            except httpx.TransportError:
                pass  # broken mid-stream: reconnect from the last id
            finally:
                resp.close()
            # A healthy stream sends the job's state first and may close cleanly (NBL_STREAM_MAX_S);
            # one that breaks with no new event, or closes having said nothing, has failed.
            if got_event or (clean and got_data):
                broken, failing_since = 0, None
                continue
        broken += 1
        failing_since = now if failing_since is None else failing_since
        if broken >= MAX_BROKEN or clock() - failing_since >= GIVE_UP_S:
            raise StreamUnavailable(f"the events stream of {job_id} failed {broken} times in a row")
        sleep(min(backoff_s(broken - 1), max(failing_since + GIVE_UP_S - clock(), 0.0)))


__all__ = ["StreamUnavailable", "follow", "parse", "Unavailable"]
