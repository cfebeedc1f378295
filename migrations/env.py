"""Alembic environment: the URL is the caller's (service.core.migrate passes it) or Settings().

Runs on SQLite (batch mode, so ALTERs work) and Postgres. Migrations are run in the tests, up and
down, on both.
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import create_engine, pool

from service.core import class_cache, stage_rate, webhook_tables  # noqa: F401  (their tables, each in its own file)
from service.core.models import Base

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from service.core.settings import Settings

    settings = Settings()
    if settings.database_is_sqlite:
        settings.ensure_dirs()
    return settings.database_url


def _configure(**kw) -> None:
    url = kw.pop("url", None) or str(kw["connection"].engine.url)
    context.configure(
        target_metadata=target_metadata,
        render_as_batch=url.startswith("sqlite"),
        compare_type=True,
        **({"url": url} if "connection" not in kw else {}),
        **kw,
    )


def run_offline() -> None:
    _configure(url=_url(), literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:  # handed over by service.core.migrate or a test
        _configure(connection=connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        _configure(connection=connection)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
