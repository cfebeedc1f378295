"""0011 adds the stage_rates table (a worker class's measured stages) and drops it again, keeping the
jobs, on SQLite and Postgres; a job's rows go with the job."""

from __future__ import annotations

from sqlalchemy import create_engine, inspect, pool

from service.core import migrate


def test_0011_adds_and_drops_stage_rates_keeping_jobs(fresh_url, seed_job):
    engine = create_engine(fresh_url, poolclass=pool.NullPool)
    migrate.upgrade(fresh_url, "0010")
    seed_job(engine, "succeeded", 1.0, 1)
    migrate.upgrade(fresh_url, "0011")
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO stage_rates (job_id, worker_class, shape, stage, weight, seconds, created_at) "
            "VALUES ('job_1', 'nbl-cpu', '30x576', 'calibrate', 1000.0, 2.5, '2026-12-03 10:00:00')"
        )
        assert conn.exec_driver_sql("SELECT stage, weight, seconds FROM stage_rates").all() == [
            ("calibrate", 1000.0, 2.5)
        ]
    assert "ix_stage_rates_worker_class_shape_stage" in {i["name"] for i in inspect(engine).get_indexes("stage_rates")}
    migrate.downgrade(fresh_url, "0010")
    assert "stage_rates" not in inspect(engine).get_table_names()
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT id, status FROM jobs").all() == [("job_1", "succeeded")]
    engine.dispose()
