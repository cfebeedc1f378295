"""The query string of GET /v1/jobs (and /ui/jobs) beyond its declared parameters: `metadata.KEY=VALUE` filters.

Any other undeclared name was refused before the route ran (service/http/query.py: a misspelt filter,
`?stauts=failed`, `?metadata_ci=1`, would otherwise be ignored and list every job). Repeated filters are
ANDed (`?metadata.ci=1&metadata.branch=main`); the same key twice with two values matches nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from fastapi import Request
from sqlalchemy import ColumnElement

from nbl.request_fields import META_KEY
from service.core.errors import InvalidRequest
from service.core.models import Job

PREFIX = "metadata."
MAX_FILTERS = 16  # a job has at most 16 metadata keys (JobCreate.metadata)
MAX_VALUE = 512  # nor longer values (MetaValue)
F = TypeVar("F", bound=Callable)

DESCRIPTION = (
    "Also `metadata.KEY=VALUE` (repeatable, all must match): only jobs whose request metadata has "
    "KEY equal to VALUE. Any other query parameter is a 422."
)


def _bad(key: str, msg: str) -> InvalidRequest:
    return InvalidRequest(f"{key!r}: {msg}", errors=[{"loc": ["query", key], "msg": msg, "type": "value_error"}])


def metadata_filters(request: Request) -> list[tuple[str, str]]:
    """The (key, value) filters of the query string; InvalidRequest (422) for a bad one."""
    filters = []
    for name, value in request.query_params.multi_items():
        if not name.startswith(PREFIX):
            continue  # a declared parameter (the others were refused: service/http/query.py)
        key = name[len(PREFIX) :]
        if not META_KEY.fullmatch(key):
            raise _bad(name, "a metadata key is 1 to 64 of A-Z a-z 0-9 _ . : / -")
        if len(value) > MAX_VALUE:
            raise _bad(name, f"a metadata value is at most {MAX_VALUE} characters")
        filters.append((key, value))
    if len(filters) > MAX_FILTERS:
        raise _bad(PREFIX + "KEY", f"at most {MAX_FILTERS} metadata filters")
    return filters


def takes_metadata(call: F) -> F:
    """Mark an endpoint or a dependency as the reader of the `metadata.KEY` parameters: the check of undeclared
    query parameters (service/http/query.py) lets them through to it."""
    call.query_prefixes = (PREFIX,)  # type: ignore[attr-defined]
    return call


@takes_metadata
async def query_filters(request: Request) -> list[tuple[str, str]]:
    """metadata_filters as the API's dependency: `async`, so FastAPI runs it without a threadpool hop."""
    return metadata_filters(request)


def metadata_clauses(filters: list[tuple[str, str]]) -> list[ColumnElement[bool]]:
    """WHERE clauses on jobs.spec (JSON on SQLite, JSONB on Postgres): spec.metadata.KEY = VALUE.
    The path is a bound parameter on both databases, never spliced into the SQL."""
    return [Job.spec[("metadata", key)].as_string() == value for key, value in filters]
