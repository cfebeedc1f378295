"""Fixtures of the fault tests (faultlib.py holds the harness they stand on)."""

from __future__ import annotations

import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultlib import Cluster, RedisServer
from testkit.models import save_tiny_checkpoint


@pytest.fixture
def hard_timeout(request):
    """The test fails with TimeoutError after its `deadline(s)` (120 s without one)."""
    seconds = getattr(request.function, "deadline_s", 120)

    def expire(signum, frame):
        raise TimeoutError(f"{request.node.name} ran past its {seconds} s limit")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def redis_server(tmp_path) -> Iterator[RedisServer]:
    """A private Redis; ask for it before `cluster_factory`, so the workers stop before it does."""
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (the fault tests start a private one)", pytrace=False)
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The tiny random Llama, saved once per session and copied into each cluster's models dir."""
    return save_tiny_checkpoint(tmp_path_factory.mktemp("fault-model") / "tiny")


@pytest.fixture
def cluster_factory(tmp_path, tiny_model):
    made: list[Cluster] = []

    def make(database_url: str | None, broker_url: str | None, **env: str) -> Cluster:
        c = Cluster(tmp_path / f"c{len(made)}", database_url, broker_url, tiny_model, **env)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
