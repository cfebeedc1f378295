"""Request dependencies: settings, a DB session per request, the caller's team, the Celery app.
All of them come from app.state, which the lifespan fills; nothing is built at import.

FastAPI runs a plain `def` dependency in its threadpool, and each such hop (two for a generator) costs
about what a query does (bench/api_profile.py): those that do no I/O are `async def`, and the hot reads
(GET /v1/jobs/{id}, GET /v1/jobs) take only the Authorization header (get_key): they look the key up
with their own query, on a Core connection of the read engine (core.db.run_read), in the one
threadpool hop of the route.

No request holds a database connection while it waits for a thread: the session dependency is `async`, and a
transaction ends in the hop that began it (service/http/hops.py, which says why)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from celery import Celery
from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from service.core.db import run_read
from service.core.errors import Unauthorized
from service.core.settings import Settings
from service.http.hops import close_session
from service.http.nul import NulInRequest
from service.keys.auth import Principal, authenticate

_bearer = HTTPBearer(auto_error=False, description="An API key from `nbl admin create-key --team NAME`")


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_session(request: Request) -> AsyncIterator[Session]:
    """One session per request, built on the event loop (a Session connects only when first used, in a
    threadpool hop). Writes commit explicitly where they happen (service.jobs.service, .submit); whatever is left open
    is rolled back at the end of the endpoint's hop (hops.OneHopRoute), or here at the latest."""
    session = request.app.state.sessions()
    try:
        yield session
    finally:
        await close_session(session)


async def get_celery(request: Request) -> Celery:
    return request.app.state.celery


def get_principal(
    request: Request,
    session: Annotated[Session, Depends(get_session)],
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    try:
        principal = authenticate(session, request.headers.get("authorization"))
    except BaseException:
        session.rollback()  # a 401 too: the connection goes back in this hop (hops.py)
        raise
    session.commit()  # end the read transaction (and keep last_used_at)
    return principal


async def get_key(
    request: Request, _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> str | None:
    """The Authorization header, for a hot read that looks the key up itself, in the same threadpool hop
    as its reads (GET /v1/jobs/{id} in the same query). A 422 found before the route ran is answered
    only after the key is checked (key_first), so a bad key is a 401 first, as with PrincipalDep."""
    return request.headers.get("authorization")


def _takes_key(dependant) -> bool:
    return any(d.call in (get_key, get_principal) or _takes_key(d) for d in dependant.dependencies)


async def key_first(request: Request, exc: Exception) -> Exception:
    """Unauthorized instead of `exc` (a 422 raised before the route checked the key: by get_key's route, or
    by the app's check of undeclared query parameters, service/http/query.py) when the route takes a key and
    the caller's is not live; otherwise `exc`."""
    route = request.scope.get("route")
    if isinstance(exc, NulInRequest) or route is None or not _takes_key(route.dependant):
        return exc  # refuse_nul runs before every route's own dependencies: its 422 came first before too

    try:
        await run_in_threadpool(
            run_read,
            request.app.state.read_engine,
            lambda conn: authenticate(conn, request.headers.get("authorization")),
        )
    except Unauthorized as unauthorized:
        return unauthorized
    return exc


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
CeleryDep = Annotated[Celery, Depends(get_celery)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
KeyDep = Annotated[str | None, Depends(get_key)]
