"""0006 adds jobs.estimate (nullable JSON) and drops it again, keeping the jobs, on SQLite and Postgres."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, inspect, pool

from service.core import migrate


@pytest.fixture(params=["sqlite", "postgres"])
def fresh_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fresh.db'}"
    return request.getfixturevalue("pg_factory")("est")


def test_0006_adds_and_drops_the_estimate_keeping_the_jobs(fresh_url):
    engine = create_engine(fresh_url, poolclass=pool.NullPool)
    migrate.upgrade(fresh_url, "0005")
    with engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO teams (id, name, created_at) VALUES (1, 'alpha', CURRENT_TIMESTAMP)")
        conn.exec_driver_sql("INSERT INTO jobs (id, team_id, status, progress, spec, created_at, updated_at, attempt, "
                             "cancel_requested) VALUES ('job_1', 1, 'queued', 0, '{}', CURRENT_TIMESTAMP, "
                             "CURRENT_TIMESTAMP, 0, false)")
    migrate.upgrade(fresh_url, "0006")
    with engine.begin() as conn:
        assert conn.exec_driver_sql("SELECT id, estimate FROM jobs").all() == [("job_1", None)]
        conn.exec_driver_sql("UPDATE jobs SET estimate = '{\"worker_class\": \"nbl-cpu\"}'")
    migrate.downgrade(fresh_url, "0005")
    assert "estimate" not in {c["name"] for c in inspect(engine).get_columns("jobs")}
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT id, status FROM jobs").all() == [("job_1", "queued")]
    engine.dispose()
