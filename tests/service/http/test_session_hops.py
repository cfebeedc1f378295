"""A request holds no database connection while it waits for a thread (issue 35, finding 2; service/http/hops.py).

With one pooled connection and one thread, requests whose transaction outlived its threadpool hop deadlocked:
the first kept the connection while it waited for the thread (FastAPI validates a sync endpoint's answer in a
second hop), and the thread stood in pool checkout for the second until the pool's timeout (a 503). On SQLite
that open transaction is also the database's write lock."""

from __future__ import annotations

import inspect
from concurrent.futures import ThreadPoolExecutor

import anyio.to_thread
import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from testkit.service_lib import body

from service.api import create_app
from service.core.db import make_engine, make_sessionmaker
from service.http.deps import get_session

PATHS = ["/v1/models", "/v1/usage", "/v1/jobs/{job}/events", "/v1/jobs/{job}/layers", "/ui/jobs", "/ui/jobs/{job}"]


async def _one_thread() -> None:
    anyio.to_thread.current_default_thread_limiter().total_tokens = 1


def test_requests_sharing_one_connection_and_one_thread_all_answer(db_url, settings_for, team_key_for):
    settings = settings_for(db_url, max_reads_per_team=100)  # all of them in flight at once (admission.py)
    auth = team_key_for(settings, "alpha")
    app = create_app(settings)
    with TestClient(app) as client:
        job = client.post("/v1/jobs", json=body(), headers=auth).json()["id"]
        narrow = make_engine(settings, pool_size=1, max_overflow=0, pool_timeout=3)
        app.state.sessions = make_sessionmaker(narrow)  # every session route: one connection
        client.portal.call(_one_thread)
        paths = [p.format(job=job) for p in PATHS] * 3
        with ThreadPoolExecutor(len(paths)) as pool:
            answers = list(pool.map(lambda p: client.get(p, headers=auth), paths))
        assert [(p, r.status_code) for p, r in zip(paths, answers)] == [(p, 200) for p in paths]
        assert narrow.pool.checkedout() == 0
        narrow.dispose()


def _routes(routes):
    """Every route of the app, through FastAPI's included routers (their original APIRoute objects)."""
    for route in routes:
        if hasattr(route, "effective_candidates"):
            yield from _routes(route.effective_candidates())
        else:
            yield getattr(route, "original_route", route)


def _uses_session(dependant) -> bool:
    return dependant.call is get_session or any(_uses_session(d) for d in dependant.dependencies)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_every_sync_route_with_a_session_ends_it_in_its_own_hop(db_url, settings_for):
    from service.http.hops import is_sync

    app = create_app(settings_for(db_url))
    checked = []
    for route in _routes(app.routes):
        if isinstance(route, APIRoute) and _uses_session(route.dependant):
            if not is_sync(inspect.unwrap(route.endpoint)):  # async: no hop of its own to end
                continue
            assert getattr(route.endpoint, "ends_sessions", False), route.path
            checked.append(route.path)
    assert "/v1/models" in checked and "/ui/jobs/{job_id}" in checked
