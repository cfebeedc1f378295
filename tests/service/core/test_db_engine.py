"""make_engine's pool options: NBL_DB_POOL_SIZE sizes the default pool, and a caller that asks for
its own pool class gets it. The worker's delivery gate (worker/delivery_gate.py) asks for NullPool;
when a pool size was forced on it, every read failed with a TypeError and each dead delivery went to
a pool child again (CI, stop 30)."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.pool import NullPool, QueuePool


def test_a_pool_class_of_the_callers_own_is_honoured(db_url, settings_for):
    engine = make(settings_for(db_url), poolclass=NullPool)
    try:
        assert isinstance(engine.pool, NullPool)
        with engine.connect() as conn:
            assert conn.scalar(text("select 1")) == 1
    finally:
        engine.dispose()


def test_postgres_default_pool_has_the_configured_size(pg_url, settings_for):
    engine = make(settings_for(pg_url, db_pool_size=7))
    try:
        assert isinstance(engine.pool, QueuePool) and engine.pool.size() == 7
    finally:
        engine.dispose()


def make(settings, **kwargs):
    from service.core.db import make_engine

    return make_engine(settings, **kwargs)


def test_the_delivery_gate_reads_a_cancelled_job_on_postgres(pg_url, settings_for, team_key_for, monkeypatch):
    """The gate's own read (a NullPool engine, as in the worker) on a job the API cancelled: dropped."""
    from fastapi.testclient import TestClient
    from testkit.service_lib import body

    from service.api import create_app
    from worker import delivery_gate

    settings = settings_for(pg_url)
    auth = team_key_for(settings)
    monkeypatch.setattr(delivery_gate, "_engine", make(settings, poolclass=NullPool))
    try:
        with TestClient(create_app(settings)) as c:
            job_id = c.post("/v1/jobs", json=body(), headers=auth).json()["id"]
            assert delivery_gate.ended(job_id) is None  # queued: the pool's claim decides
            assert c.post(f"/v1/jobs/{job_id}/cancel", headers=auth).json()["status"] == "cancelled"
        assert delivery_gate.ended(job_id) == "already cancelled"
        assert delivery_gate.ended("job_missing") == "unknown job"
    finally:
        delivery_gate._engine.dispose()
