"""The query string of GET /v1/jobs beyond its declared parameters: `metadata.KEY=VALUE` filters.

Every other parameter name is a 422: a misspelt filter (`?stauts=failed`, `?metadata_ci=1`)
would otherwise be ignored and list every job. The declared names are read from the route itself,
so a parameter added there is accepted here without a second list. Repeated filters are ANDed
(`?metadata.ci=1&metadata.branch=main`); the same key twice with two values matches nothing.
"""

from __future__ import annotations

from fastapi import Request
from sqlalchemy import ColumnElement

from service.core.errors import InvalidRequest
from service.core.models import Job
from nbl.request import META_KEY

PREFIX = "metadata."
MAX_FILTERS = 16  # a job has at most 16 metadata keys (JobCreate.metadata)
MAX_VALUE = 512  # nor longer values (MetaValue)

DESCRIPTION = ("Also `metadata.KEY=VALUE` (repeatable, all must match): only jobs whose request metadata has "
               "KEY equal to VALUE. Any other query parameter is a 422.")


def _bad(key: str, msg: str) -> InvalidRequest:
    return InvalidRequest(f"{key!r}: {msg}", errors=[{"loc": ["query", key], "msg": msg, "type": "value_error"}])


def _declared(dependant) -> set[str]:
    """The query parameter names of a route and of its dependencies."""
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _declared(sub)
    return names


def metadata_filters(request: Request) -> list[tuple[str, str]]:
    """The (key, value) filters of the query string; InvalidRequest (422) for an undeclared parameter."""
    route = request.scope.get("route")
    declared = _declared(route.dependant) if route is not None else set()
    filters = []
    for name, value in request.query_params.multi_items():
        if name in declared:
            continue
        if not name.startswith(PREFIX):
            allowed = ", ".join(sorted(declared) + [PREFIX + "KEY"])
            raise _bad(name, f"unknown query parameter; this route takes {allowed}")
        key = name[len(PREFIX):]
        if not META_KEY.fullmatch(key):
            raise _bad(name, "a metadata key is 1 to 64 of A-Z a-z 0-9 _ . : / -")
        if len(value) > MAX_VALUE:
            raise _bad(name, f"a metadata value is at most {MAX_VALUE} characters")
        filters.append((key, value))
    if len(filters) > MAX_FILTERS:
        raise _bad(PREFIX + "KEY", f"at most {MAX_FILTERS} metadata filters")
    return filters


async def query_filters(request: Request) -> list[tuple[str, str]]:
    """metadata_filters as the API's dependency: `async`, so FastAPI runs it without a threadpool hop."""
    return metadata_filters(request)


def metadata_clauses(filters: list[tuple[str, str]]) -> list[ColumnElement[bool]]:
    """WHERE clauses on jobs.spec (JSON on SQLite, JSONB on Postgres): spec.metadata.KEY = VALUE.
    The path is a bound parameter on both databases, never spliced into the SQL."""
    return [Job.spec[("metadata", key)].as_string() == value for key, value in filters]
