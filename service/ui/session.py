"""Who is looking at a page: the same team keys as the API (service/keys/auth.py).

A page takes `Authorization: Bearer <key>` (scripts, tests) or the key in a cookie that the login
form sets: HttpOnly (no script reads it), SameSite=Strict (no other site's page or form sends it;
that alone does not stop a forged login, hence csrf.py), Path=/ui, and Secure when the request
came over https: its own scheme, or X-Forwarded-Proto when Settings.trust_forwarded_proto says the
proxy in front sets it. The cookie holds the key itself; only its sha256 is stored server-side.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from service.core.errors import Unauthorized
from service.http.credential import COOKIE  # the team limits read it before routing (service/http/admission.py)
from service.keys.auth import Principal, authenticate

PATH = "/ui"
MAX_AGE_S = 12 * 3600  # a working day; log in again after


class LoginRequired(Exception):
    """No credentials, or a cookie that no longer authenticates: the page redirects to the login form."""


def principal(request: Request, session: Session) -> Principal:
    """The caller's team. A wrong Bearer header is Unauthorized (a script should see a 401);
    a missing or stale cookie is LoginRequired."""
    header = request.headers.get("authorization")
    if header:
        try:
            return authenticate(session, header)
        finally:
            session.commit()  # last_used_at, and the end of the read transaction
    key = request.cookies.get(COOKIE)
    if not key:
        raise LoginRequired()
    try:
        return authenticate(session, f"Bearer {key}")
    except Unauthorized:
        raise LoginRequired() from None
    finally:
        session.commit()


def is_https(request: Request) -> bool:
    if request.url.scheme == "https":
        return True
    settings = request.app.state.settings
    proto = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return settings.trust_forwarded_proto and proto == "https"


def set_key(response: Response, request: Request, key: str) -> None:
    response.set_cookie(
        COOKIE, key, max_age=MAX_AGE_S, path=PATH, httponly=True, samesite="strict", secure=is_https(request)
    )


def clear_key(response: Response, request: Request) -> None:
    response.delete_cookie(COOKIE, path=PATH, httponly=True, samesite="strict", secure=is_https(request))


def safe_next(target: str | None) -> str:
    """Where to go after logging in: a page of the dashboard only (never another host: `//evil`)."""
    if target and target.startswith(PATH + "/") and not target.startswith("//") and "\\" not in target:
        return target
    return PATH + "/jobs"
