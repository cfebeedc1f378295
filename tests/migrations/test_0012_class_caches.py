"""0012 adds class_caches (what a worker class holds for later jobs), one note per class, kind and key, and
drops it again keeping the measured rates, on SQLite and Postgres."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, exc, inspect, pool

from service.core import migrate

RATE = (
    "INSERT INTO stage_rates (job_id, worker_class, shape, stage, weight, seconds, created_at) "
    "VALUES ('job_1', 'nbl-cpu', '30x576', 'load', 100.0, 2.5, '2026-12-04 10:00:00')"
)
NOTE = (
    "INSERT INTO class_caches (worker_class, kind, key, job_id, created_at) "
    "VALUES ('nbl-cpu', 'model', 'org/m@main', 'job_1', '2026-12-04 10:00:00')"
)


def test_0012_adds_and_drops_class_caches(fresh_url, seed_job):
    engine = create_engine(fresh_url, poolclass=pool.NullPool)
    migrate.upgrade(fresh_url, "0011")
    seed_job(engine, "succeeded", 1.0, 1)
    with engine.begin() as conn:
        conn.exec_driver_sql(RATE)
    migrate.upgrade(fresh_url, "0012")
    with engine.begin() as conn:
        conn.exec_driver_sql(NOTE)
    with pytest.raises(exc.IntegrityError), engine.begin() as conn:
        conn.exec_driver_sql(NOTE)  # one note per class, kind and key
    migrate.downgrade(fresh_url, "0011")
    assert "class_caches" not in inspect(engine).get_table_names()
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT stage, seconds FROM stage_rates").all() == [("load", 2.5)]
    engine.dispose()
