"""The hot reads' engine (service.core.db.make_read_engine, run_read): on Postgres a pool of its own
in autocommit and without a pre-ping, so a pooled connection the server dropped is found by the read
itself, which then runs once more on a fresh one: the caller sees a 200, not the 503 of an outage.
On both databases a read records the key's use (last_used_at), committed by autocommit or run_read."""

from __future__ import annotations

import psycopg
from sqlalchemy import select, text, update
from sqlalchemy.pool import QueuePool
from testkit.service_lib import body

from service.core.models import ApiKey


def _pooled_pid(engine) -> int:
    """The backend of the read pool's one connection (the test client's reads run one at a time)."""
    assert isinstance(engine.pool, QueuePool) and engine.pool.checkedin() == 1
    with engine.connect() as conn:
        return conn.scalar(text("select pg_backend_pid()"))


def _terminate(pg_url: str, pid: int) -> None:
    with psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as admin:
        assert admin.execute("select pg_terminate_backend(%s)", (pid,)).fetchone()[0] is True


def test_a_read_on_a_connection_the_server_dropped_runs_again(pg_url, settings_for, team_key_for):
    from fastapi.testclient import TestClient

    from service.api import create_app

    settings = settings_for(pg_url)
    auth = team_key_for(settings)
    with TestClient(create_app(settings)) as c:
        job_id = c.post("/v1/jobs", json=body(), headers=auth).json()["id"]
        engine = c.app.state.read_engine
        assert engine is not c.app.state.engine and not engine.pool._pre_ping
        for path in (f"/v1/jobs/{job_id}", "/v1/jobs", f"/v1/jobs/{job_id}"):
            assert c.get(path, headers=auth).status_code == 200  # the pool holds a connection
            old = _pooled_pid(engine)
            _terminate(pg_url, old)
            r = c.get(path, headers=auth)
            assert r.status_code == 200, r.text
            assert job_id in r.text
            assert _pooled_pid(engine) != old  # the dead one was dropped, not pooled again
        bad = c.get(f"/v1/jobs/{job_id}", headers={"Authorization": "Bearer nbl_not-a-real-key"})
        assert bad.status_code == 401


def test_a_read_records_the_keys_use(client, auth, sessions):
    job_id = client.post("/v1/jobs", json=body(), headers=auth).json()["id"]
    with sessions() as s:
        s.execute(update(ApiKey).values(last_used_at=None))
        s.commit()
    assert client.get(f"/v1/jobs/{job_id}", headers=auth).status_code == 200
    with sessions() as s:
        assert s.scalar(select(ApiKey.last_used_at)) is not None
