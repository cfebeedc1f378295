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


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def make_read_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    """Sessions for the API's hot reads (GET /v1/jobs/{id}, GET /v1/jobs). On Postgres they run in
    autocommit: each statement is its own transaction, as it is at READ COMMITTED inside one, so a read
    costs its queries and no BEGIN and COMMIT round trips. SQLite keeps its ordinary sessions (their
    BEGIN IMMEDIATE is local, and autocommit would bypass it)."""
    if engine.dialect.name == "sqlite":
        return make_sessionmaker(engine)
    return sessionmaker(engine.execution_options(isolation_level="AUTOCOMMIT"), expire_on_commit=False)


def autocommit(session: Session) -> bool:
    return session.get_bind().get_execution_options().get("isolation_level") == "AUTOCOMMIT"


def end_read(session: Session) -> None:
    """End a read transaction: commit, except in autocommit, where there is none and a commit would
    only hand the connection back for the next query to check out (and ping) again."""
    if not autocommit(session):
        session.commit()


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
