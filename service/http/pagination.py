"""The cursors of the API's paged lists (GET /v1/jobs, /v1/usage, /v1/models): `next_cursor` names the last
item given, the next request passes it as `after`. A cursor is opaque to clients: url-safe base64, unpadded,
of `VERSION:VALUE`, where the version says which list made it (v1: a job id, u1: a month, m1: a model id),
so one list's cursor is refused by another, and the form can change with the version.
"""

from __future__ import annotations

import base64
import binascii
import re

from service.core.errors import InvalidRequest

NOT_A_CURSOR = "`after` is not a cursor this API returned"


def encode_cursor(version: str, value: str) -> str:
    return base64.urlsafe_b64encode(f"{version}:{value}".encode()).decode().rstrip("=")


def cursor_value(cursor: str, version: str) -> str | None:
    """The value encode_cursor(version, value) put in `cursor`; None when it is not one of `version`."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raw = ""
    found, _, value = raw.partition(":")
    return value if found == version else None


def bad_cursor(detail: str = NOT_A_CURSOR) -> InvalidRequest:
    """The 422 of an `after` that names nothing: the query parameter, as a validation error does."""
    return InvalidRequest(detail, errors=[{"loc": ["query", "after"], "msg": "invalid cursor", "type": "value_error"}])


def decode_cursor(cursor: str, version: str, value: re.Pattern) -> str:
    """The value in `cursor`, a `version` cursor whose value matches `value` whole; else bad_cursor()."""
    found = cursor_value(cursor, version)
    if found is None or not value.fullmatch(found):
        raise bad_cursor()
    return found
