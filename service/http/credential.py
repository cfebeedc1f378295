"""The key a request carries, read from its raw ASGI headers before any routing (admission.py): the
`Authorization: Bearer KEY` header of the API, else the dashboard's login cookie, COOKIE, which
service/ui/session.py sets and reads."""

from __future__ import annotations

from starlette.requests import cookie_parser

COOKIE = "nbl_ui_key"


def credential(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The key a request carries: `Authorization: Bearer KEY`, else the dashboard's login cookie."""
    cookie = None
    for name, value in headers:
        if name == b"authorization":
            scheme, _, key = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and key.strip():
                return key.strip()
        elif name == b"cookie":
            cookie = value.decode("latin-1")
    if cookie is None:
        return None
    return cookie_parser(cookie).get(COOKIE) or None
