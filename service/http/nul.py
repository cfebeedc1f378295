"""NUL (U+0000) is refused in every request, in one place: the path, the query string, header
values and the body, before any route reads them.

Postgres stores no NUL in text or JSONB (psycopg raises DataError: `?metadata.x=%00` was a 500) while
SQLite does, so a string that passed one database failed the other; a check per field misses the
next field. The app runs this as a dependency of every route (service.api.app), so the error is a
422 problem+json like any invalid parameter, and an HTML page under /ui (service.ui.install).

In a body NUL is a raw 0x00 byte or a JSON `\\u0000` escape: a `\\u0000` preceded by an odd run of
backslashes (an even run is an escaped backslash followed by the text `u0000`). The error names the
JSON field that holds it (`body.metadata.KEY`), as a validator of that field would.

An unpaired surrogate (U+D800..U+DFFF alone) is refused in a JSON body the same way: it is no character
and UTF-8 cannot encode it, so it fails wherever the string is next encoded (Fernet on a Hub token was a
500). It comes as a `\\ud800` escape (a pair of escapes decodes to one character, and passes) or as the
raw bytes ED A0..BF xx, which json.loads decodes with surrogatepass; a key holding one is shown escaped.
"""

from __future__ import annotations

import json
import re

from fastapi import Request

from service.core.errors import InvalidRequest

from .limits import BODYLESS  # bodies never read, nor size-limited

NUL = "\x00"
_JSON_NUL = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")
_SURROGATE = re.compile("[\ud800-\udfff]")
# What may decode to a surrogate: an escape of one (a pair too: the parse tells them apart), or its raw bytes.
_JSON_SURROGATE = re.compile(rb"\\u[dD][89abcdefABCDEF]|\xed[\xa0-\xbf]")


class NulInRequest(InvalidRequest):
    msg = "NUL (U+0000) is not allowed in a request"

    def __init__(self, *loc: str | int):
        super().__init__(
            f"{'.'.join(map(str, loc))}: {self.msg}",
            errors=[{"loc": list(loc), "msg": self.msg, "type": "value_error"}],
        )


class SurrogateInRequest(NulInRequest):
    msg = "an unpaired surrogate (U+D800 to U+DFFF alone) is not text: not allowed in a request"


def _has_nul(text: str) -> bool:
    return NUL in text


def _has_surrogate(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def _shown(name: str) -> str:
    """A key as the error shows it: NUL and surrogates escaped (the answer is UTF-8 JSON), at most 100 characters."""
    return name.encode("utf-8", "backslashreplace").decode().replace(NUL, "\\x00")[:100]


def _json_path(body: bytes, bad) -> list | None:
    """Where the first string or key for which `bad` holds is in a JSON body; None when there is none or the
    body does not parse."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # FastAPI refuses it with its own 422
        return None
    stack: list[tuple[tuple, object]] = [((), doc)]
    while stack:  # depth first, without recursion
        path, value = stack.pop()
        if isinstance(value, str) and bad(value):
            return list(path)
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, item in items:
            if isinstance(key, str) and bad(key):
                return [*path, _shown(key)]
            stack.append(((*path, _shown(key) if isinstance(key, str) else key), item))
    return None


async def refuse_nul(request: Request) -> None:
    if NUL in request.scope["path"]:
        raise NulInRequest("path")
    for name, value in request.query_params.multi_items():
        if NUL in name or NUL in value:
            raise NulInRequest("query", _shown(name))
    for name, value in request.headers.items():
        if NUL in value:
            raise NulInRequest("header", name)
    if request.method not in BODYLESS:
        body = await request.body()  # cached: the route reads the same bytes
        if b"\x00" in body or _JSON_NUL.search(body):
            raise NulInRequest("body", *(_json_path(body, _has_nul) or []))
        if _JSON_SURROGATE.search(body):
            where = _json_path(body, _has_surrogate)
            if where is not None:
                raise SurrogateInRequest("body", *where)
