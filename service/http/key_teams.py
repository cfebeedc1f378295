"""Which team a key belongs to, known before a request takes a thread or a connection (service/http/admission.py).

It only says which team's limits a request counts against. Every request is still authenticated by its own
query, so a key revoked now is refused now (docs/security.md); here it may count against its team for TTL_S
more, which refuses nothing. A key that is not live (unknown, revoked, malformed) is team None: such requests
share one set of limits, so a flood of bad keys is bounded as one team's is.

A miss costs one indexed query on the read engine, in one threadpool hop, and concurrent misses of one key
share it (a flood from a key this process has not seen yet asks once). Kept per API process: LRU, CAPACITY
keys, each for TTL_S.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable

from fastapi.concurrency import run_in_threadpool
from sqlalchemy import Engine, bindparam, select

from service.core.db import run_read
from service.core.models import ApiKey
from service.keys.auth import KEY_PREFIX, hash_key

TTL_S = 60.0
CAPACITY = 10_000
MAX_KEY = 200  # longer is never a key (keys.auth.authenticate_rows refuses it unread)

_TEAM = select(ApiKey.team_id).where(ApiKey.key_hash == bindparam("key_hash"), ApiKey.revoked_at.is_(None))


class KeyTeams:
    """sha256(key) -> team id or None, for TTL_S; used on the event loop only (no lock)."""

    def __init__(
        self,
        engine: Engine,
        ttl_s: float = TTL_S,
        capacity: int = CAPACITY,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._engine, self._ttl_s, self._capacity, self._clock = engine, ttl_s, capacity, clock
        self._teams: OrderedDict[str, tuple[float, int | None]] = OrderedDict()  # digest -> (expires, team)
        self._asking: dict[str, asyncio.Future] = {}

    async def team_of(self, key: str) -> int | None:
        if not key.startswith(KEY_PREFIX) or len(key) > MAX_KEY:
            return None
        digest = hash_key(key)
        known = self._teams.get(digest)
        if known is not None and known[0] > self._clock():
            self._teams.move_to_end(digest)
            return known[1]
        asking = self._asking.get(digest)
        if asking is None:
            asking = self._asking[digest] = asyncio.ensure_future(self._look_up(digest))
            asking.add_done_callback(lambda done: self._done(digest, done))
        return await asyncio.shield(asking)  # a caller that goes away leaves the lookup to the others

    async def _look_up(self, digest: str) -> int | None:
        team = await run_in_threadpool(run_read, self._engine, lambda conn: conn.scalar(_TEAM, {"key_hash": digest}))
        self._teams[digest] = (self._clock() + self._ttl_s, team)
        self._teams.move_to_end(digest)
        while len(self._teams) > self._capacity:
            self._teams.popitem(last=False)
        return team

    def _done(self, digest: str, done: asyncio.Future) -> None:
        self._asking.pop(digest, None)
        if not done.cancelled():
            done.exception()  # retrieved: every caller may have gone; the next miss asks again (nothing cached)
