"""The migration tests' fixtures: a fresh, empty database on SQLite and on Postgres, and the one seed (a team
and a job) that each migration must carry through its upgrade and its downgrade."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine


@pytest.fixture(params=["sqlite", "postgres"])
def fresh_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fresh.db'}"
    return request.getfixturevalue("pg_factory")("mig")


@pytest.fixture
def seed_job():
    """seed_job(engine, status, progress, attempt): team 1 'alpha' and its job 'job_1', in the columns
    every revision since 0002 has."""

    def seed(engine: Engine, status: str = "queued", progress: float = 0, attempt: int = 0) -> None:
        with engine.begin() as conn:
            conn.exec_driver_sql("INSERT INTO teams (id, name, created_at) VALUES (1, 'alpha', CURRENT_TIMESTAMP)")
            conn.exec_driver_sql(
                "INSERT INTO jobs (id, team_id, status, progress, spec, created_at, updated_at, attempt, "
                f"cancel_requested) VALUES ('job_1', 1, '{status}', {progress}, '{{}}', CURRENT_TIMESTAMP, "
                f"CURRENT_TIMESTAMP, {attempt}, false)"
            )

    return seed
