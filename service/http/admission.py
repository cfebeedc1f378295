"""Per-team limits on requests in flight, checked before a request reaches the app (issue 35, findings 2 and 3).

One team's flood used to queue in front of everyone: 200 concurrent GETs from one team held every thread
and connection of the API process, and another team's job read waited tens of seconds behind them. Now each
team (found from its key: key_teams.py) may have, in one API process, at most

    NBL_MAX_READS_PER_TEAM    GET/HEAD requests in flight (a download counts until its last byte),
    NBL_MAX_WRITES_PER_TEAM   other requests in flight (submits, cancels, estimates),
    NBL_MAX_STREAMS_PER_TEAM  open event streams (STREAMS: the API's and the dashboard's; not reads),

and one more is refused at once: 429 problem+json with Retry-After (too-many-requests: 1 s, as a request
in flight takes milliseconds; too-many-streams: STREAM_RETRY_AFTER_S), an error page under /ui. Reads and
writes count apart, so a team's own read flood never starves its submits.

The check is a pure ASGI middleware, outermost: a refusal costs no thread, no query (once the key is known),
no connection, and none of the framework's routing and dependencies either. A flood that ignores
Retry-After keeps the event loop busy with refusals, and every other request waits its turns of that loop,
so their cost is what the other teams see: in process a refusal takes 63 us (/healthz through FastAPI: 206
us); under 200 connections of one team that ignore Retry-After, another team's submit took 0.78 s at the
median with this check as a FastAPI dependency, 0.42 to 0.51 s as this middleware (bench/team_flood.py).

A request without a key is not counted: every route that needs one refuses it (401, the dashboard's login
page) before any query. Keys that are not live count together as team None. The limits are per process:
with N API processes a team may have N times as many in flight.
"""

from __future__ import annotations

import inspect
import logging
import re

from starlette.requests import Request

from service.core.errors import ServiceError, TooManyRequests, TooManyStreams
from service.core.settings import Settings
from service.http.credential import credential

log = logging.getLogger(__name__)

# Every route's documented 429 (the app's `responses`): a route's own 429 (a job cap) says more.
REFUSED = {
    "content": {"application/problem+json": {}},
    "headers": {"Retry-After": {"schema": {"type": "integer"}}},
    "description": "too many of your team's requests (too-many-requests) or event streams (too-many-streams) "
    "in flight on this server: retry after `Retry-After` seconds",
}
REQUEST_RETRY_AFTER_S = 1
STREAM_RETRY_AFTER_S = 5  # a stream lasts up to NBL_STREAM_MAX_S: its slot frees later than a request's
SAFE = ("GET", "HEAD", "OPTIONS")
# The event streams: GET /v1/jobs/{id}/events/stream (service/jobs/stream.py) and the dashboard's
# /ui/jobs/{id}/events/stream (service/ui/actions.py); tests/service/http/test_team_limits.py checks that every
# route answering text/event-stream is one of them.
STREAMS = re.compile(r"/(v1|ui)/jobs/[^/]+/events/stream")
# The dashboard's session routes take no key from the request's credentials (login reads it from its form, logout
# only clears the cookie): a stale login cookie (a revoked key's) would count them against the keys that are not
# live, whose slots anyone can hold with bodies never finished under made-up keys, and lock that browser out.
UNCOUNTED = frozenset({"/ui/login", "/ui/logout"})


class TeamSlots:
    """What each team has in flight, by kind ("read", "write", "stream"), against the Settings' limits.
    Touched on the event loop only: no lock."""

    def __init__(self, settings: Settings):
        self.limits = {
            "read": settings.max_reads_per_team,
            "write": settings.max_writes_per_team,
            "stream": settings.max_streams_per_team,
        }
        self.in_flight: dict[tuple[str, int | None], int] = {}

    def take(self, kind: str, team: int | None) -> None:
        held = self.in_flight.get((kind, team), 0)
        if held >= self.limits[kind]:
            if kind == "stream":
                raise TooManyStreams(
                    f"your team has {held} event streams open on this server, its limit; close "
                    "one, or poll GET /v1/jobs/{id}/events",
                    retry_after_s=STREAM_RETRY_AFTER_S,
                )
            raise TooManyRequests(
                f"your team has {held} {kind}s in flight on this server, its limit; retry after Retry-After seconds",
                retry_after_s=REQUEST_RETRY_AFTER_S,
            )
        self.in_flight[(kind, team)] = held + 1

    def give_back(self, kind: str, team: int | None) -> None:
        held = self.in_flight.pop((kind, team)) - 1
        if held:
            self.in_flight[(kind, team)] = held


def kind_of(scope) -> str:
    if STREAMS.fullmatch(scope["path"]):
        return "stream"
    return "read" if scope["method"] in SAFE else "write"


class TeamLimits:
    """The ASGI middleware: the request's slot, held until its response is sent (a stream's: until it closes)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        key = credential(scope["headers"]) if scope["type"] == "http" and scope["path"] not in UNCOUNTED else None
        if key is None:
            return await self.app(scope, receive, send)
        state = scope["app"].state
        try:
            team = await state.key_teams.team_of(key)
        except Exception as e:  # noqa: BLE001 - the database is away: the request meets it itself (a 503)
            log.warning("team of a key not known (%s: %s); request let through uncounted", type(e).__name__, e)
            return await self.app(scope, receive, send)
        kind, slots = kind_of(scope), state.team_slots
        try:
            slots.take(kind, team)
        except ServiceError as refused:
            return await _answer(scope, receive, send, refused)
        try:
            await self.app(scope, receive, send)
        finally:
            slots.give_back(kind, team)


async def _answer(scope, receive, send, exc: ServiceError) -> None:
    """`exc` answered by the app's own handler for it, as if a route had raised it: problem+json (service.api.
    problems), the error page under /ui (service.ui.install)."""
    handlers = scope["app"].exception_handlers
    handler = next(handlers[cls] for cls in type(exc).__mro__ if cls in handlers)
    response = handler(Request(scope, receive), exc)
    if inspect.isawaitable(response):
        response = await response
    await response(scope, receive, send)
