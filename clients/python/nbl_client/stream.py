"""Following a job over `GET /v1/jobs/{id}/events/stream` (Server-Sent Events) instead of polling.

`follow(api, job_id, after, deadline)` yields ("event", Event), ("job", {status, stage, progress,
stage_progress, eta_seconds}), ("heartbeat", None) when the server says it is alive, and finally
("end", {...}) once the job has ended. When the server
closes a stream without `end` (it does after NBL_STREAM_MAX_S) or the connection breaks, it
reconnects with `Last-Event-ID`, so no event is lost or repeated. A server without the stream
(an older one: 404/405 on the route) raises StreamUnavailable, and the caller polls instead.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator

from .http import Api, ApiError, Unavailable
from .models import Event

READ_TIMEOUT_S = 45.0  # the server sends a heartbeat after 15 s of silence
MAX_BROKEN = 5  # streams in a row that break before sending anything: give up on streaming


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


def follow(api: Api, job_id: str, after: int | None, deadline: float | None,
           clock=time.monotonic) -> Iterator[tuple[str, object]]:
    """The stream's items until the job ends (module docstring). Raises StreamUnavailable, ApiError,
    Unavailable (the API stayed unreachable), or TimeoutError once `deadline` (monotonic) passes."""
    import httpx

    broken = 0
    while True:
        left = None if deadline is None else deadline - clock()
        if left is not None and left <= 0:
            raise TimeoutError(job_id)
        read = READ_TIMEOUT_S if left is None else max(min(READ_TIMEOUT_S, left), 0.05)
        headers = {"Accept": "text/event-stream"} | ({} if after is None else {"Last-Event-ID": str(after)})
        try:
            resp = api.stream(f"/v1/jobs/{job_id}/events/stream", deadline=deadline, headers=headers,
                              timeout=httpx.Timeout(read, connect=10.0))
        except ApiError as e:
            if e.status in (404, 405, 406, 501):  # the job was read just before: it is the route that is missing
                raise StreamUnavailable(str(e)) from None
            raise
        if not resp.headers.get("content-type", "").startswith("text/event-stream"):
            resp.close()
            raise StreamUnavailable(f"the events stream answered {resp.headers.get('content-type')!r}")
        sent = False
        try:
            for kind, data, ident in parse(resp.iter_lines()):
                sent = True
                if kind == "message":
                    event = Event.model_validate(json.loads(data))
                    after = event.id if ident is None else int(ident)
                    yield "event", event
                elif kind == "comment":
                    if data == "heartbeat":
                        yield "heartbeat", None
                elif kind in ("job", "end"):
                    yield kind, json.loads(data)
                    if kind == "end":
                        return
        except httpx.TimeoutException:
            if deadline is not None and clock() >= deadline:
                raise TimeoutError(job_id) from None
        except httpx.TransportError:
            pass  # broken mid-stream: reconnect from the last id
        finally:
            resp.close()
        broken = 0 if sent else broken + 1
        if broken >= MAX_BROKEN:  # e.g. a proxy that ends every stream at once
            raise StreamUnavailable(f"the events stream of {job_id} closed {broken} times without an event")


__all__ = ["StreamUnavailable", "follow", "parse", "Unavailable"]
