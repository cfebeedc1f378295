"""Run the Alembic migrations in migrations/ from Python (the CLI, `nbl serve`, the tests)."""

from __future__ import annotations

import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, pool

from service.core.settings import Settings

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]  # service/core/migrate.py -> the checkout
MIGRATIONS_DIR = REPO / "migrations"


class SchemaOutOfDate(ValueError):
    """A user-facing error (the CLI prints it): the database needs `nbl admin migrate`."""


def alembic_config(database_url: str) -> Config:
    if not (MIGRATIONS_DIR / "env.py").is_file():
        raise RuntimeError(f"migrations not found at {MIGRATIONS_DIR}; run from a checkout of nbl-service")
    cfg = Config(str(REPO / "alembic.ini")) if (REPO / "alembic.ini").is_file() else Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    cfg.attributes["configure_logger"] = False  # leave the caller's logging alone
    return cfg


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(database_url), revision)


def head_revision() -> str:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def ensure_schema(settings: Settings) -> str:
    """Upgrade a fresh database to head; refuse one at an older revision (say so, don't guess).

    Returns "created" or "current".
    """
    if settings.database_is_sqlite:
        settings.ensure_dirs()
    engine = create_engine(settings.database_url, poolclass=pool.NullPool)
    try:
        current = current_revision(engine)
    finally:
        engine.dispose()
    if current is None:
        log.info("fresh database %s: running migrations", engine.url.render_as_string(hide_password=True))
        upgrade(settings.database_url)
        return "created"
    head = head_revision()
    if current != head:
        raise SchemaOutOfDate(f"database schema is at {current}, code expects {head}: run `nbl admin migrate`")
    return "current"
