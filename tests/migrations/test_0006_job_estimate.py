"""0006 adds jobs.estimate (nullable JSON) and drops it again, keeping the jobs, on SQLite and Postgres."""

from __future__ import annotations

from sqlalchemy import create_engine, inspect, pool

from service.core import migrate


def test_0006_adds_and_drops_the_estimate_keeping_the_jobs(fresh_url, seed_job):
    engine = create_engine(fresh_url, poolclass=pool.NullPool)
    migrate.upgrade(fresh_url, "0005")
    seed_job(engine)
    migrate.upgrade(fresh_url, "0006")
    with engine.begin() as conn:
        assert conn.exec_driver_sql("SELECT id, estimate FROM jobs").all() == [("job_1", None)]
        conn.exec_driver_sql('UPDATE jobs SET estimate = \'{"worker_class": "nbl-cpu"}\'')
    migrate.downgrade(fresh_url, "0005")
    assert "estimate" not in {c["name"] for c in inspect(engine).get_columns("jobs")}
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT id, status FROM jobs").all() == [("job_1", "queued")]
    engine.dispose()
