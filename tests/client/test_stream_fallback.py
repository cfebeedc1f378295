"""A stream that keeps failing ends in polling, within a bounded time, whatever the fault.

Client.follow (`nbl logs --follow`) and Client.wait (`nbl wait`) against the real API behind
faulty_proxy: the stream route resets after a partial answer, stalls after its head, never answers,
or answers 503 every time. Before the fix, a reset after the stream's opening comment reconnected
for ever, and a 503 kept the HTTP layer retrying for ever (no deadline is given to `--follow`).
Every event must come out exactly once, in order, and the client must say it polls instead."""

from __future__ import annotations

import threading

import pytest
from faulty_proxy import FAULTS, FaultyProxy
from testkit.service_lib import body

from nbl_client import Client, stream
from service.api import create_app
from service.jobs import lease, states, store

HANG_S = 60  # far beyond the bounds set below: only a client that hangs meets it


@pytest.fixture
def upstream(sqlite_clean_url, settings_for, live_server, team_key_for, monkeypatch):
    """The real API on SQLite (the fault is in the client's network, not the database): its URL, a key
    and a session factory of its database."""
    from service.core.db import make_engine, make_sessionmaker

    monkeypatch.setattr(stream, "GIVE_UP_S", 1.0, raising=False)  # the fallback's bounds, small for a test
    monkeypatch.setattr(stream, "READ_TIMEOUT_S", 0.5)
    settings = settings_for(sqlite_clean_url)
    engine = make_engine(settings)
    yield (
        live_server(create_app(settings)),
        team_key_for(settings, "alpha")["Authorization"].split()[1],
        make_sessionmaker(engine),
    )
    engine.dispose()


def in_thread(fn):
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def finish(sessions, job_id: str, token) -> None:
    with sessions() as s:
        store.add_event(s, job_id, "warning", "written after the stream failed")
        states.finish(s, job_id, token, "succeeded")


@pytest.mark.parametrize("fault", FAULTS)
def test_follow_polls_once_the_stream_keeps_failing(upstream, fault):
    url, key, sessions = upstream
    warned: list[str] = []
    fallen_back = threading.Event()

    def warn(line: str) -> None:
        warned.append(line)
        if "polling instead" in line:
            fallen_back.set()

    with Client(url, key, connect_timeout=5) as direct:
        job = direct.submit(body())
    with sessions() as s:
        token = lease.claim_job(s, job.id, 60)
        store.set_progress(s, job.id, "score", 0.5, lease_token=token)
        for i in range(5):
            store.add_event(s, job.id, "log", f"event {i} " + "x" * 100)
    proxy = FaultyProxy(url, fault, keep=400)
    try:
        with Client(proxy.url, key, connect_timeout=5, warn=warn) as c:
            t, out = in_thread(lambda: [e.message for e in c.follow(job.id, interval=0.05)])
            assert fallen_back.wait(HANG_S), f"no fallback to polling; said {warned}"
            finish(sessions, job.id, token)
            t.join(HANG_S)
            assert not t.is_alive(), "follow did not end after the job did"
    finally:
        proxy.close()
    assert "error" not in out, out.get("error")
    with Client(url, key, connect_timeout=5) as direct:
        every = [e.message for e in direct.events(job.id, limit=1000).data]
    assert out["value"] == every and every[-1] == "succeeded"
    assert proxy.streams >= 1 and "written after the stream failed" in every


@pytest.mark.parametrize("fault", ["reset", "busy"])
def test_wait_polls_once_the_stream_keeps_failing(upstream, fault):
    url, key, sessions = upstream
    with Client(url, key, connect_timeout=5) as direct:
        job = direct.submit(body())
    with sessions() as s:
        token = lease.claim_job(s, job.id, 60)
    proxy = FaultyProxy(url, fault)
    warned: list[str] = []
    fallen_back = threading.Event()

    def warn(line: str) -> None:
        warned.append(line)
        if "polling instead" in line:
            fallen_back.set()

    try:
        with Client(proxy.url, key, connect_timeout=5, warn=warn) as c:
            t, out = in_thread(lambda: c.wait(job.id, interval=0.05, max_interval=0.2))
            assert fallen_back.wait(HANG_S), f"no fallback to polling; said {warned}"
            finish(sessions, job.id, token)
            t.join(HANG_S)
            assert not t.is_alive(), "wait did not end after the job did"
    finally:
        proxy.close()
    assert "error" not in out, out.get("error")
    assert out["value"].status == "succeeded"
