"""Fixtures for the service tests: real databases, real brokers, no mocks.

A plugin that tests/conftest.py loads (`pytest_plugins`): the tests of the service, its CLI, client and
dashboard use them, and so do the worker's, integration, fault and GGUF tests that run a job through the API.

- SQLite: one migrated file per test session. Postgres (127.0.0.1:5432, user postgres, trust auth):
  a throwaway database per test session, created from the `test` database and dropped at the end.
  Both are migrated with Alembic (the migrations are what is tested, not create_all). Tables are
  emptied after each test (committed data: the API, uvicorn threads and workers all commit).
- Brokers: the embedded kombu SQLAlchemy transport on a SQLite file per test (so "nothing was
  queued" is checkable), or the real Redis at 127.0.0.1:6379 (db 15, a queue name per test).

Override the servers with NBL_TEST_POSTGRES_URL / NBL_TEST_REDIS_URL.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest

from testkit.service_lib import PG_ADMIN_URL, REDIS_URL, TABLES


def _pg_admin_connect():
    import psycopg

    url = PG_ADMIN_URL.replace("postgresql+psycopg://", "postgresql://")
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as e:
        pytest.fail(
            f"Postgres is not reachable at {PG_ADMIN_URL} ({e}); the service tests need it "
            "(.ci/run starts it; or set NBL_TEST_POSTGRES_URL)",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def pg_factory():
    """Creates throwaway Postgres databases; drops them all at the end of the session."""
    from sqlalchemy.engine import make_url

    created: list[str] = []
    admin = _pg_admin_connect()

    def make(tag: str = "svc") -> str:
        name = f"nbl_{tag}_{uuid.uuid4().hex[:10]}"
        admin.execute(f'CREATE DATABASE "{name}"')
        created.append(name)
        return make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)

    yield make
    for name in created:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.close()


@pytest.fixture(scope="session")
def postgres_url(pg_factory) -> str:
    from service.core.migrate import upgrade

    url = pg_factory()
    upgrade(url)
    return url


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory) -> str:
    from service.core.migrate import upgrade

    url = f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'nbl.db'}"
    upgrade(url)
    return url


@pytest.fixture(scope="session")
def _cleaners(request):
    engines = {}
    yield engines
    for e in engines.values():
        e.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request, _cleaners):
    """Each test that takes this runs on both databases; tables are emptied afterwards."""
    url = request.getfixturevalue(f"{request.param}_url")
    yield url
    _truncate(url, _cleaners)


@pytest.fixture
def sqlite_clean_url(sqlite_url, _cleaners):
    """SQLite only (the embedded default)."""
    yield sqlite_url
    _truncate(sqlite_url, _cleaners)


@pytest.fixture
def pg_url(postgres_url, _cleaners):
    """Postgres only (the concurrency tests)."""
    yield postgres_url
    _truncate(postgres_url, _cleaners)


def _truncate(url: str, engines: dict) -> None:
    from sqlalchemy import create_engine, text

    if url not in engines:
        engines[url] = create_engine(url)
    with engines[url].begin() as conn:
        if url.startswith("postgresql"):
            conn.execute(text(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE"))
        else:
            for table in reversed(TABLES):
                conn.execute(text(f"DELETE FROM {table}"))


@pytest.fixture
def settings_for(tmp_path):
    """settings_for(db_url, **overrides): Settings with a fresh NBL_HOME and embedded broker."""
    from service.core.settings import Settings

    def make(url: str, **overrides):
        home = tmp_path / f"home-{uuid.uuid4().hex[:6]}"
        kw = dict(home=home, database_url=url, broker_url=f"sqla+sqlite:///{home / 'broker.db'}")
        kw.update(overrides)
        return Settings(**kw)

    return make


@pytest.fixture
def settings(db_url, settings_for):
    return settings_for(db_url)


@pytest.fixture
def client(settings):
    from fastapi.testclient import TestClient

    from service.api import create_app

    with TestClient(create_app(settings)) as c:
        yield c


@pytest.fixture
def sessions(settings):
    from service.core.db import make_engine, make_sessionmaker

    engine = make_engine(settings)
    yield make_sessionmaker(engine)
    engine.dispose()


@pytest.fixture
def team_key(sessions):
    """team_key(name) -> headers with a fresh key for that team."""
    from service.keys.auth import create_key, get_or_create_team

    def make(name: str = "alpha") -> dict[str, str]:
        with sessions() as s:
            team, _ = get_or_create_team(s, name)
            key, _ = create_key(s, team)
        return {"Authorization": f"Bearer {key}"}

    return make


@pytest.fixture
def auth(team_key) -> dict[str, str]:
    return team_key("alpha")


@pytest.fixture
def team_key_for():
    """team_key_for(settings, team) -> headers with a fresh key, in that settings' database."""
    from service.core.db import make_engine, make_sessionmaker
    from service.keys.auth import create_key, get_or_create_team

    def make(settings, team: str = "alpha") -> dict[str, str]:
        engine = make_engine(settings)
        with make_sessionmaker(engine)() as s:
            key, _ = create_key(s, get_or_create_team(s, team)[0])
        engine.dispose()
        return {"Authorization": f"Bearer {key}"}

    return make


@pytest.fixture
def redis_queue():
    """A Redis broker URL and a queue name of this test's own; the keys are deleted afterwards."""
    import redis

    r = redis.Redis.from_url(REDIS_URL)
    try:
        r.ping()
    except redis.ConnectionError as e:
        pytest.fail(f"Redis is not reachable at {REDIS_URL} ({e}); .ci/run starts it", pytrace=False)
    queue = f"nbl-test-{uuid.uuid4().hex[:8]}"
    yield REDIS_URL, queue, r
    for key in r.scan_iter(f"*{queue}*"):
        r.delete(key)
    r.close()


@pytest.fixture
def live_server():
    """live_server(app) -> base URL of a real uvicorn server in a thread (stopped afterwards)."""
    import uvicorn

    servers = []

    def start(app) -> str:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        servers.append((server, thread))
        port = server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(timeout=10)


# The folders of the service tests (the API, its CLI and client, the dashboard, the migrations): marked `service`.
SERVICE_DIRS = ("service", "cli", "client", "ui", "migrations")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "service: the service tests (real Postgres and Redis); `-m 'not service'` skips them"
    )


def pytest_collection_modifyitems(items):
    for item in items:
        if any(f"tests/{d}/" in str(item.fspath).replace(os.sep, "/") for d in SERVICE_DIRS):
            item.add_marker(pytest.mark.service)
