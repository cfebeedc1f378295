"""Engines and sessions, built by whoever runs (app lifespan, CLI command, worker), never at import.

SQLite (the embedded default) gets WAL, a busy timeout, foreign keys, and BEGIN IMMEDIATE for every
transaction: a deferred transaction that reads and then writes can fail at once with "database is
locked" when another writer got in between, while an immediate one simply waits its turn. The price
is that a transaction holds the write lock until it ends, so keep transactions short: the store
functions commit before they return; never hold a session open across a long stage.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.exc import DBAPIError
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
    # Below the requests in flight, every connection past the pool is opened and closed per request
    # (a Postgres backend each time): SQLAlchemy's default of 5 cost the API most of its read rate.
    if "poolclass" not in kwargs:  # a pool size is for the default QueuePool only: NullPool refuses it (TypeError)
        kwargs.setdefault("pool_size", settings.db_pool_size)
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


T = TypeVar("T")


def make_read_engine(settings: Settings, engine: Engine) -> Engine:
    """The engine of the API's hot reads (GET /v1/jobs/{id}, GET /v1/jobs; run_read). On Postgres, a pool
    of its own in autocommit (each statement its own transaction, as at READ COMMITTED: no BEGIN and
    COMMIT round trips) and without the pre-ping, a round trip that cost a read a fifth of its CPU:
    run_read retries instead when a pooled connection turns out dead. SQLite: `engine` itself."""
    if engine.dialect.name == "sqlite":
        return engine
    return make_engine(settings, pool_pre_ping=False, isolation_level="AUTOCOMMIT", pool_reset_on_return=None)


def run_read(engine: Engine, read: Callable[[Connection], T]) -> T:
    """`read(connection)`, once more on a fresh connection when the first was dead (the database
    restarted since it was pooled: SQLAlchemy then drops every connection pooled before). A read has no
    effect to repeat; any other error, and a second dead connection, are raised (503 while the database
    is away: service.http.problems)."""
    try:
        return _read_once(engine, read)
    except DBAPIError as e:
        if not e.connection_invalidated:
            raise
    return _read_once(engine, read)


def _read_once(engine: Engine, read: Callable[[Connection], T]) -> T:
    with engine.connect() as conn:
        out = read(conn)
        if engine.dialect.name == "sqlite" and conn.in_transaction():  # Postgres: autocommit (make_read_engine)
            conn.commit()  # a key's last_used_at may have been written
        return out


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
