"""Idempotent creation under real concurrency: 20 simultaneous POSTs with one Idempotency-Key to a
real uvicorn server (its thread pool, its own DB sessions) create exactly one job and one message."""

from __future__ import annotations

import threading

import httpx
import pytest
from sqlalchemy import func, select
from testkit.service_lib import body, sqla_broker_messages

from service.api import create_app
from service.core.models import Job


def _race(base_url: str, headers: dict, n: int = 20, json=None) -> list[httpx.Response]:
    barrier = threading.Barrier(n)
    results: list[httpx.Response | Exception] = [None] * n  # type: ignore[list-item]

    def post(i: int) -> None:
        with httpx.Client(base_url=base_url, timeout=60) as c:
            barrier.wait()
            try:
                results[i] = c.post("/v1/jobs", json=json or body(), headers=headers)
            except Exception as e:  # noqa: BLE001 - reported below
                results[i] = e

    threads = [threading.Thread(target=post, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [r for r in results if isinstance(r, Exception)]
    assert not errors, errors
    return results  # type: ignore[return-value]


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_twenty_concurrent_posts_with_one_key_make_one_job(backend, request, settings_for, live_server, team_key_for):
    url = request.getfixturevalue("pg_url" if backend == "postgres" else "sqlite_clean_url")
    settings = settings_for(url)
    base = live_server(create_app(settings))
    headers = team_key_for(settings, "racers") | {"Idempotency-Key": "deploy-7f3a"}

    responses = _race(base, headers)
    assert {r.status_code for r in responses} == {201}, [r.text for r in responses if r.status_code != 201]
    ids = {r.json()["id"] for r in responses}
    assert len(ids) == 1
    assert sum(r.headers.get("idempotent-replayed") != "true" for r in responses) == 1  # one creator

    from service.core.db import make_engine

    engine = make_engine(settings)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Job)).scalar() == 1
    engine.dispose()
    assert [m["args"] for m in sqla_broker_messages(settings)] == [[ids.pop()]]

    # Same key, another body, still racing: every one of them is refused, nothing new is created.
    responses = _race(base, headers, n=8, json=body(k=9))
    assert {r.status_code for r in responses} == {422}


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_one_key_at_the_team_cap_replays_instead_of_429(backend, request, settings_for, live_server, team_key_for):
    """The team may run one job: the first of 20 racing POSTs with one key creates it (now at the cap), the
    19 others are replays of it, never 429s (the key is looked up under the team's lock, before the cap)."""
    url = request.getfixturevalue("pg_url" if backend == "postgres" else "sqlite_clean_url")
    settings = settings_for(url, max_active_jobs_per_team=1)
    base = live_server(create_app(settings))
    headers = team_key_for(settings, "capped") | {"Idempotency-Key": "at-the-cap"}

    responses = _race(base, headers)
    assert [r.status_code for r in responses] == [201] * 20, [r.text for r in responses if r.status_code != 201]
    assert len({r.json()["id"] for r in responses}) == 1
    assert sum(r.headers.get("idempotent-replayed") != "true" for r in responses) == 1

    # The cap still holds for a new key
    with httpx.Client(base_url=base, timeout=60) as c:
        resp = c.post("/v1/jobs", json=body(), headers=headers | {"Idempotency-Key": "another"})
    assert resp.status_code == 429, resp.text
