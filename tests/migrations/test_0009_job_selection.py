"""0009 adds jobs.selection (nullable) and drops it again, keeping the jobs, on SQLite and Postgres."""

from __future__ import annotations

from sqlalchemy import create_engine, inspect, pool

from service.core import migrate


def test_0009_adds_and_drops_the_selection_keeping_jobs(fresh_url, seed_job):
    engine = create_engine(fresh_url, poolclass=pool.NullPool)
    migrate.upgrade(fresh_url, "0008")
    seed_job(engine, "running", 0.25, 1)
    migrate.upgrade(fresh_url, "0009")
    with engine.begin() as conn:
        assert conn.exec_driver_sql("SELECT id, selection FROM jobs").all() == [("job_1", None)]
        conn.exec_driver_sql("""UPDATE jobs SET selection = '{"criterion": "greedy"}'""")
    migrate.downgrade(fresh_url, "0008")
    assert "selection" not in {c["name"] for c in inspect(engine).get_columns("jobs")}
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT id, status FROM jobs").all() == [("job_1", "running")]
    engine.dispose()
