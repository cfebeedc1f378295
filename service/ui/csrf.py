"""Cross-site request forgery: every POST of the dashboard must come from one of its own forms.

SameSite=Strict keeps the key cookie off other sites' requests, which stops a forged logout but not
a forged login: a cross-site form that posts the attacker's key signs the victim into the
attacker's team (the response's cookie is set all the same). So every form carries a token that
another site cannot know, and a POST is refused (protect) unless
- the browser says it came from this origin: `Sec-Fetch-Site: same-origin` (or `none`, typed by
  the user); where a browser sends no Sec-Fetch-Site, an `Origin` must name this host; and
- its `csrf` field equals the token of the cookies it carries (double submit): when logged in, an
  HMAC of the session's key (tied to the session: another site knows neither); before login, the
  random pre-session cookie nbl_ui_csrf that the login form sets.
Scripts that send neither header are held by the token alone.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import parse_qsl, urlsplit

from fastapi import Request
from fastapi.responses import Response

from . import session

COOKIE = "nbl_ui_csrf"
FIELD = "csrf"
SAFE = ("GET", "HEAD", "OPTIONS")


class CsrfRefused(Exception):
    """A POST without this dashboard's token or from another origin: 403 (install() renders it)."""


def token(request: Request) -> str | None:
    """The token this request's forms carry, or None when it has neither cookie."""
    key = request.cookies.get(session.COOKIE)
    if key:
        return hmac.new(key.encode(), b"nbl-ui-csrf", hashlib.sha256).hexdigest()
    return request.cookies.get(COOKIE) or None


def set_presession(request: Request, response: Response, value: str) -> None:
    """The login form's pre-session cookie (`value`: secrets.token_urlsafe(32))."""
    response.set_cookie(
        COOKIE,
        value,
        max_age=session.MAX_AGE_S,
        path=session.PATH,
        httponly=True,
        samesite="strict",
        secure=session.is_https(request),
    )


def _netloc(value: str) -> str:
    """host[:port], lower case, without a default port (browsers omit it, a proxy may not)."""
    host, sep, port = value.lower().rpartition(":")
    return host if sep and port in ("80", "443") else value.lower()


def _same_origin(request: Request) -> bool:
    site = request.headers.get("sec-fetch-site")
    if site is not None:  # set by the browser itself; a page cannot forge it
        return site in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return True  # an old browser or a script: the token decides
    return origin != "null" and _netloc(urlsplit(origin).netloc) == _netloc(request.headers.get("host", ""))


async def protect(request: Request) -> None:
    """A dependency of every dashboard route: lets safe methods through, checks every other one."""
    if request.method in SAFE:
        return
    if not _same_origin(request):
        raise CsrfRefused()
    try:
        form = dict(parse_qsl((await request.body()).decode("utf-8", "replace"), max_num_fields=8))
    except ValueError:  # more fields than any form of ours
        raise CsrfRefused() from None
    expected, sent = token(request), form.get(FIELD, "")
    if not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
        raise CsrfRefused()
