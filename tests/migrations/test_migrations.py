"""The Alembic migrations, run for real on SQLite and Postgres: up, matching the models exactly,
down to nothing, and up again."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, pool

from service.core import (
    class_cache,  # noqa: F401  (the class_caches table, likewise)
    migrate,
    stage_rate,  # noqa: F401  (the stage_rates table, in its own file)
    webhook_tables,  # noqa: F401  (the webhook tables, likewise)
)
from service.core.models import Base
from service.core.settings import Settings

TABLES = {"teams", "api_keys", "jobs", "job_events", "layer_scores", "metrics", "artifacts"}


def test_upgrade_downgrade_upgrade(fresh_url):
    engine = create_engine(fresh_url, poolclass=pool.NullPool)
    migrate.upgrade(fresh_url)
    assert TABLES <= set(inspect(engine).get_table_names())
    assert migrate.current_revision(engine) == migrate.head_revision()
    with engine.connect() as conn:  # the migrations build exactly what the models describe
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diff == []

    migrate.downgrade(fresh_url, "base")
    assert set(inspect(engine).get_table_names()) - {"alembic_version"} == set()
    assert migrate.current_revision(engine) is None

    migrate.upgrade(fresh_url)
    assert TABLES <= set(inspect(engine).get_table_names())
    engine.dispose()


def test_ensure_schema_migrates_a_fresh_database_once(fresh_url, tmp_path):
    settings = Settings(home=tmp_path / "home", database_url=fresh_url)
    assert migrate.ensure_schema(settings) == "created"
    assert migrate.ensure_schema(settings) == "current"


def test_ensure_schema_refuses_an_old_schema(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    migrate.upgrade(url)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0000'")
    engine.dispose()
    with pytest.raises(migrate.SchemaOutOfDate, match="nbl admin migrate"):
        migrate.ensure_schema(Settings(home=tmp_path / "home", database_url=url))


def test_0005_adds_and_drops_last_used_at_keeping_the_keys(fresh_url):
    """A key made before 0005 survives the upgrade (never used: NULL) and the downgrade."""
    engine = create_engine(fresh_url, poolclass=pool.NullPool)
    migrate.upgrade(fresh_url, "0004")
    with engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO teams (id, name, created_at) VALUES (1, 'alpha', CURRENT_TIMESTAMP)")
        conn.exec_driver_sql(
            "INSERT INTO api_keys (id, team_id, prefix, key_hash, created_at) "
            "VALUES (1, 1, 'nbl_x', 'h', CURRENT_TIMESTAMP)"
        )
    migrate.upgrade(fresh_url)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT id, last_used_at FROM api_keys").all() == [(1, None)]
    migrate.downgrade(fresh_url, "0004")
    assert "last_used_at" not in {c["name"] for c in inspect(engine).get_columns("api_keys")}
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT id, prefix FROM api_keys").all() == [(1, "nbl_x")]
    engine.dispose()
