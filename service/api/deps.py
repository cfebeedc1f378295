"""Request dependencies: settings, a DB session per request, the caller's team, the Celery app.
All of them come from app.state, which the lifespan fills; nothing is built at import."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from celery import Celery
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from service.keys.auth import Principal, authenticate
from service.core.settings import Settings

_bearer = HTTPBearer(auto_error=False, description="An API key from `nbl admin create-key --team NAME`")


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    """One session per request. Writes commit explicitly where they happen (service.jobs.service);
    whatever is left open is rolled back when the session closes."""
    session = request.app.state.sessions()
    try:
        yield session
    finally:
        session.close()


def get_celery(request: Request) -> Celery:
    return request.app.state.celery


def get_principal(request: Request, session: Annotated[Session, Depends(get_session)],
                  _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Principal:
    principal = authenticate(session, request.headers.get("authorization"))
    session.commit()  # end the read transaction
    return principal


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
CeleryDep = Annotated[Celery, Depends(get_celery)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
