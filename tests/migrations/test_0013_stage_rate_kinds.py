"""0013 adds stage_rates.kind (rates per stage and kind of work): rows written before read as kind '', new
rows carry theirs, and the downgrade drops the column keeping the rows, on SQLite and Postgres."""

from __future__ import annotations

from sqlalchemy import create_engine, inspect, pool

from service.core import migrate

RATE = (
    "INSERT INTO stage_rates (job_id, worker_class, shape, stage, weight, seconds, created_at) "
    "VALUES ('job_1', 'nbl-cpu', '30x576', 'calibrate', 100.0, 2.5, '2026-12-05 10:00:00')"
)
KINDED = (
    "INSERT INTO stage_rates (job_id, worker_class, shape, stage, kind, weight, seconds, created_at) "
    "VALUES ('job_1', 'nbl-cpu', '30x576', 'calibrate', 'cached', 10.0, 0.5, '2026-12-05 10:01:00')"
)


def test_0013_adds_and_drops_the_kind(fresh_url, seed_job):
    engine = create_engine(fresh_url, poolclass=pool.NullPool)
    migrate.upgrade(fresh_url, "0012")
    seed_job(engine, "succeeded", 1.0, 1)
    with engine.begin() as conn:
        conn.exec_driver_sql(RATE)
    migrate.upgrade(fresh_url, "0013")
    with engine.begin() as conn:
        conn.exec_driver_sql(KINDED)
        assert conn.exec_driver_sql("SELECT kind, seconds FROM stage_rates ORDER BY id").all() == [
            ("", 2.5),
            ("cached", 0.5),
        ]
    migrate.downgrade(fresh_url, "0012")
    assert "kind" not in {c["name"] for c in inspect(engine).get_columns("stage_rates")}
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT stage, seconds FROM stage_rates ORDER BY id").all() == [
            ("calibrate", 2.5),
            ("calibrate", 0.5),
        ]
    engine.dispose()
