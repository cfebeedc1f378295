"""A request's database transaction never outlives the threadpool hop that began it (issue 35, finding 2).

FastAPI runs each plain `def` endpoint in its threadpool (40 threads), then validates the endpoint's return
value in a second hop, and closed the request's session (the SessionDep generator) only after the response
was sent. A read that did not commit kept its connection checked out ("idle in transaction") while it
waited for that second hop, and the threads it waited for were themselves waiting for a connection: 100
concurrent GET /v1/models held all 30 of the pool's, every thread stood in pool checkout until its 30 s
timeout, and every other team's request (the hot reads too, which wait for a thread) stalled behind
them. On SQLite the open transaction is the database's write lock (BEGIN IMMEDIATE): "database is locked".

So the transaction ends where it ran:
- OneHopRoute closes, at the end of a sync endpoint's own hop, every Session it was given (commits are
  explicit, service.jobs.service and .submit: close rolls back whatever is left and returns the connection); every
  router of the API uses it (tests/service/http/test_session_hops.py holds them to it);
- a sync dependency that uses the session ends its transaction itself (deps.get_principal, stream.start_for,
  ui.session.principal);
- the session dependency itself is `async` (building a Session does no I/O) and closes the session on the
  event loop when it holds no connection; when one is still open (an error before a commit), off the shared
  threadpool (close_session), so that a connection never queues for a thread.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import anyio.to_thread
from anyio import CapacityLimiter
from fastapi.routing import APIRoute
from sqlalchemy.orm import Session


def is_sync(call: Callable) -> bool:
    """A plain `def`: FastAPI runs it in its threadpool."""
    return not (
        inspect.iscoroutinefunction(call) or inspect.isasyncgenfunction(call) or inspect.isgeneratorfunction(call)
    )


def ending_sessions(endpoint: Callable) -> Callable:
    """`endpoint`, closing the Sessions among its arguments before its hop ends (async ones as they are)."""
    if getattr(endpoint, "ends_sessions", False) or not is_sync(endpoint):
        return endpoint

    @functools.wraps(endpoint)  # FastAPI reads the signature (and its annotations' module) through __wrapped__
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return endpoint(*args, **kwargs)
        finally:
            for value in kwargs.values():
                if isinstance(value, Session):
                    value.close()

    run.ends_sessions = True  # type: ignore[attr-defined]
    return run


class OneHopRoute(APIRoute):
    """The API's route class: a sync endpoint's transaction ends in the endpoint's own hop."""

    def __init__(self, path: str, endpoint: Callable, **kwargs: Any):
        super().__init__(path, ending_sessions(endpoint), **kwargs)


async def close_session(session: Session) -> None:
    """Close the request's session from the event loop: at once when it holds no connection (no I/O), else
    in a thread of its own (a limiter per call, as FastAPI closes its own generator dependencies), never
    queued behind the threadpool's other work with the connection checked out."""
    if not session.in_transaction():
        session.close()
        return
    await anyio.to_thread.run_sync(session.close, limiter=CapacityLimiter(1))
