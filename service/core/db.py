"""Engines and sessions, built by whoever runs (app lifespan, CLI command, worker), never at import.

SQLite (the embedded default) gets WAL, a busy timeout, foreign keys, and BEGIN IMMEDIATE for every
transaction: a deferred transaction that reads and then writes can fail at once with "database is
locked" when another writer got in between, while an immediate one simply waits its turn. The price
is that a transaction holds the write lock until it ends, so keep transactions short: the store
functions commit before they return; never hold a session open across a long stage.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from service.core.settings import Settings


def make_engine(settings: Settings, **kwargs) -> Engine:
    url = settings.database_url
    if url.startswith("sqlite"):
        settings.ensure_dirs()
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, **kwargs)
        _sqlite_pragmas(engine)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(url, **kwargs)


def _sqlite_pragmas(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None  # let SQLAlchemy's "begin" event below issue BEGIN
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session that is rolled back on error and always closed (commits are explicit)."""
    session = factory()
    try:
        yield session
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
