"""0009 adds jobs.selection (nullable) and drops it again, keeping the jobs, on SQLite and Postgres."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, inspect, pool

from service.core import migrate


@pytest.fixture(params=["sqlite", "postgres"])
def fresh_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fresh.db'}"
    return request.getfixturevalue("pg_factory")("sel")


def test_0009_adds_and_drops_the_selection_keeping_jobs(fresh_url):
    engine = create_engine(fresh_url, poolclass=pool.NullPool)
    migrate.upgrade(fresh_url, "0008")
    with engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO teams (id, name, created_at) VALUES (1, 'alpha', CURRENT_TIMESTAMP)")
        conn.exec_driver_sql("INSERT INTO jobs (id, team_id, status, progress, spec, created_at, updated_at, attempt, "
                             "cancel_requested) VALUES ('job_1', 1, 'running', 0.25, '{}', CURRENT_TIMESTAMP, "
                             "CURRENT_TIMESTAMP, 1, false)")
    migrate.upgrade(fresh_url, "0009")
    with engine.begin() as conn:
        assert conn.exec_driver_sql("SELECT id, selection FROM jobs").all() == [("job_1", None)]
        conn.exec_driver_sql("""UPDATE jobs SET selection = '{"criterion": "greedy"}'""")
    migrate.downgrade(fresh_url, "0008")
    assert "selection" not in {c["name"] for c in inspect(engine).get_columns("jobs")}
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT id, status FROM jobs").all() == [("job_1", "running")]
    engine.dispose()
