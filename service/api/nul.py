"""NUL (U+0000) is refused in every request, in one place: the path, the query string, header
values and the body, before any route reads them.

Postgres stores no NUL in text or JSONB (psycopg raises DataError: `?metadata.x=%00` was a 500) while
SQLite does, so a string that passed one database failed the other; a check per field misses the
next field. The app runs this as a dependency of every route (service.api.app), so the error is a
422 problem+json like any invalid parameter, and an HTML page under /ui (service.ui.install).

In a body NUL is a raw 0x00 byte or a JSON `\\u0000` escape: a `\\u0000` preceded by an odd run of
backslashes (an even run is an escaped backslash followed by the text `u0000`). The error names the
JSON field that holds it (`body.metadata.KEY`), as a validator of that field would.
"""

from __future__ import annotations

import json
import re

from fastapi import Request

from service.core.errors import InvalidRequest
from .limits import BODYLESS  # bodies never read, nor size-limited

NUL = "\x00"
_JSON_NUL = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")


class NulInRequest(InvalidRequest):
    def __init__(self, *loc: str | int):
        msg = "NUL (U+0000) is not allowed in a request"
        super().__init__(f"{'.'.join(map(str, loc))}: {msg}",
                         errors=[{"loc": list(loc), "msg": msg, "type": "value_error"}])


def _shown(name: str) -> str:
    return name.replace(NUL, "\\x00")[:100]


def _json_path(body: bytes) -> list:
    """Where a string or key holding NUL is in a JSON body ([] when it does not parse)."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # FastAPI refuses it with its own 422
        return []
    stack: list[tuple[tuple, object]] = [((), doc)]
    while stack:  # depth first, without recursion
        path, value = stack.pop()
        if isinstance(value, str) and NUL in value:
            return list(path)
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, item in items:
            if isinstance(key, str) and NUL in key:
                return [*path, _shown(key)]
            stack.append(((*path, key), item))
    return []


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
            raise NulInRequest("body", *_json_path(body))
