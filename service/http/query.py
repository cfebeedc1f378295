"""Every route refuses a query parameter it does not declare: a 422 naming it, in one place (issue 35, finding 8).

A misspelt parameter (`?stauts=failed`, `?limt=5`) was ignored by every route but the job list and answered as
if it had not been sent. The app runs refuse_undeclared as a dependency of every route (service.api.app), the
dashboard's too (an error page there, service.ui.install). What a route declares is read from the route
itself (its parameters and those of its dependencies), so a parameter added to a route needs no second list.
A route that takes a family of names (GET /v1/jobs's and /ui/jobs's `metadata.KEY`) says so with a
`query_prefixes` attribute on its endpoint or on one of its dependencies (service.jobs.filters.takes_metadata),
which then checks those names.
"""

from __future__ import annotations

from fastapi import Request

from service.core.errors import InvalidRequest

# Every route's documented 422 (the app's `responses`; a route's own says more).
REFUSED = {
    "content": {"application/problem+json": {}},
    "description": "a query parameter this route does not declare, or another invalid parameter",
}


class UndeclaredQueryParameter(InvalidRequest):
    def __init__(self, name: str, allowed: list[str]):
        msg = (
            f"unknown query parameter; this route takes {', '.join(allowed)}"
            if allowed
            else "unknown query parameter; this route takes no query parameters"
        )
        super().__init__(f"{name!r}: {msg}", errors=[{"loc": ["query", name], "msg": msg, "type": "value_error"}])


def declared(dependant) -> tuple[set[str], tuple[str, ...]]:
    """The query parameter names of a route and of its dependencies, and the prefixes they take."""
    names = {p.alias for p in dependant.query_params}
    prefixes = tuple(getattr(dependant.call, "query_prefixes", ()))
    for sub in dependant.dependencies:
        more, more_prefixes = declared(sub)
        names |= more
        prefixes += more_prefixes
    return names, prefixes


async def refuse_undeclared(request: Request) -> None:
    route = request.scope.get("route")
    if route is None or not request.url.query:
        return
    names, prefixes = declared(route.dependant)
    for name in request.query_params.keys():
        if name not in names and not (prefixes and name.startswith(prefixes)):
            raise UndeclaredQueryParameter(name, sorted(names) + [p + "KEY" for p in prefixes])
