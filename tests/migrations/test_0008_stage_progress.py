"""0008 adds jobs.stage_progress and the events' stage_progress and eta_seconds (nullable), and drops
them again, keeping the jobs and their events, on SQLite and Postgres."""

from __future__ import annotations

from sqlalchemy import create_engine, inspect, pool

from service.core import migrate


def columns(engine, table: str) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns(table)}


def test_0008_adds_and_drops_the_stage_progress_keeping_jobs_and_events(fresh_url, seed_job):
    engine = create_engine(fresh_url, poolclass=pool.NullPool)
    migrate.upgrade(fresh_url, "0007")
    seed_job(engine, "running", 0.25, 1)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO job_events (job_id, created_at, kind, stage, progress) VALUES "
            "('job_1', CURRENT_TIMESTAMP, 'stage', 'calibrate', 0.25)"
        )
    migrate.upgrade(fresh_url, "0008")
    with engine.begin() as conn:
        assert conn.exec_driver_sql("SELECT id, progress, stage_progress FROM jobs").all() == [("job_1", 0.25, None)]
        assert conn.exec_driver_sql("SELECT stage, stage_progress, eta_seconds FROM job_events").all() == [
            ("calibrate", None, None)
        ]
        conn.exec_driver_sql("UPDATE jobs SET stage_progress = 0.5")
        conn.exec_driver_sql("UPDATE job_events SET stage_progress = 0.5, eta_seconds = 12.5")
    migrate.downgrade(fresh_url, "0007")
    assert "stage_progress" not in columns(engine, "jobs")
    assert not {"stage_progress", "eta_seconds"} & columns(engine, "job_events")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT id, status, progress FROM jobs").all() == [("job_1", "running", 0.25)]
        assert conn.exec_driver_sql("SELECT stage, progress FROM job_events").all() == [("calibrate", 0.25)]
    engine.dispose()
