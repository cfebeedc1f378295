"""Database outages: which errors mean "the database is away for now" rather than a bug, and riding
them out.

The API answers those with 503 + Retry-After (service.http.problems); the worker retries its writes
through a short outage instead of failing the job (worker.tasks); the reconciler tries again on
its next pass. Anything else (a constraint violated, a bad query) is a bug and is raised at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import exc as sa_exc

log = logging.getLogger(__name__)
T = TypeVar("T")

# SQLite reports everything as OperationalError, "no such table" included: only these are transient.
_SQLITE_TRANSIENT = ("database is locked", "database is busy", "unable to open database file", "disk i/o error")


def is_transient(e: BaseException) -> bool:
    """True for a lost or refused connection, a server shutting down or starting up, an exhausted
    pool, a deadlock, or a locked SQLite file."""
    if isinstance(e, sa_exc.TimeoutError):  # no pooled connection came free in time
        return True
    if not isinstance(e, sa_exc.DBAPIError):
        return False
    if e.connection_invalidated:
        return True
    if isinstance(e, (sa_exc.OperationalError, sa_exc.InterfaceError)):
        if type(e.orig).__module__.startswith("sqlite3"):
            return any(m in str(e.orig).lower() for m in _SQLITE_TRANSIENT)
        return True  # psycopg: connection refused/lost, admin shutdown, starting up, deadlock
    return False


def retrying(fn: Callable[[], T], *, for_s: float, what: str, first_wait_s: float = 0.2, max_wait_s: float = 2.0) -> T:
    """fn(), retried with backoff while it fails transiently, for up to `for_s` seconds; then the
    last error is raised. fn must be safe to run twice: a commit whose reply was lost may have
    landed."""
    deadline = time.monotonic() + for_s
    wait = first_wait_s
    while True:
        try:
            return fn()
        except Exception as e:
            if not is_transient(e) or time.monotonic() + wait > deadline:
                raise
            log.warning("%s: database unavailable (%s); retrying in %.1f s", what, type(e).__name__, wait)
            time.sleep(wait)
            wait = min(wait * 2, max_wait_s)
