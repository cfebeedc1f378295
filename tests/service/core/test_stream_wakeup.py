"""Open event streams woken through Redis pub/sub (service/core/wakeup.py), with the real Redis: a commit
that wrote a job's events publishes its id, only after the commit; an open stream whose poll is a minute
away sends the worker's new events at once; with Redis unreachable, commits still succeed and the stream
polls as before."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
import redis
from testkit.service_lib import REDIS_URL
from testkit.ui_seed import seed_job

from nbl_client.stream import parse
from service.api import create_app
from service.core.db import make_engine, make_sessionmaker
from service.core.models import Job
from service.core.wakeup import CHANNEL, Publisher, attach
from service.jobs import states, store

DEAD_REDIS = "redis://127.0.0.1:1/0"


def _key(headers: dict) -> str:
    return headers["Authorization"].split()[1]


@pytest.fixture
def world(sqlite_clean_url, settings_for, team_key_for):
    def make(**overrides):
        settings = settings_for(sqlite_clean_url, **overrides)
        engine = make_engine(settings)
        return settings, engine, team_key_for(settings, "alpha")

    return make


def test_a_commit_publishes_the_jobs_whose_events_it_wrote(world):
    settings, engine, auth = world(wakeup_url=REDIS_URL)
    plain = make_sessionmaker(engine)
    job = seed_job(plain, settings, _key(auth), finish=None)
    sessions = attach(make_sessionmaker(engine), Publisher(REDIS_URL))
    sub = redis.Redis.from_url(REDIS_URL).pubsub()
    sub.subscribe(CHANNEL)
    assert sub.get_message(timeout=2)["type"] == "subscribe"

    def published() -> list[str]:
        got, deadline = [], time.monotonic() + 1.0
        while time.monotonic() < deadline:
            m = sub.get_message(timeout=0.1)
            if m and m["type"] == "message" and m["data"].decode() == job:
                got.append(job)
        return got

    with sessions() as s:
        states.event(s, job, "log", message="never committed")
        s.flush()
        s.rollback()
    assert published() == []  # a rolled-back event wakes nobody
    with sessions() as s:
        store.add_event(s, job, "log", "news")
    assert published() == [job]
    with sessions() as s:  # a progress update that writes no event still changes what a stream shows
        store.set_progress(s, job, "evaluate", 0.51, lease_token=s.get(Job, job).lease_token)
    assert published() == [job]
    from fastapi.testclient import TestClient

    with TestClient(create_app(settings)) as client:  # the API's cancel, through its own sessions
        assert client.post(f"/v1/jobs/{job}/cancel", headers=auth).status_code == 200
    assert published() == [job]
    sub.close()
    engine.dispose()


def test_an_open_stream_sends_new_events_at_once_not_at_its_next_poll(world, live_server):
    settings, engine, auth = world(stream_poll_s=60, wakeup_url=REDIS_URL)  # the next poll: 15 s (heartbeat)
    app = create_app(settings)
    url = live_server(app)
    deadline = time.monotonic() + 10
    while not app.state.waker.subscribed:
        assert time.monotonic() < deadline, "the API never subscribed"
        time.sleep(0.02)
    worker = attach(make_sessionmaker(engine), Publisher(REDIS_URL))  # as worker/tasks.py builds its sessions
    job = seed_job(worker, settings, _key(auth), finish=None)
    seen: list = []
    # No byte for 5 s fails the read: a stream left to its poll would wait 15 s for its heartbeat.
    with httpx.stream(
        "GET", f"{url}/v1/jobs/{job}/events/stream", headers=auth, timeout=httpx.Timeout(30, read=5)
    ) as r:
        for kind, data, _ in parse(r.iter_lines()):
            seen.append((kind, data))
            if kind == "job" and len([k for k, _ in seen if k == "job"]) == 1:

                def work():
                    with worker() as s:
                        store.add_event(s, job, "log", "late news", stage="evaluate")
                    time.sleep(0.5)
                    with worker() as s:
                        states.finish(s, job, s.get(Job, job).lease_token, "succeeded")

                threading.Thread(target=work).start()
            if kind == "end":
                break
    messages = [json.loads(d)["message"] for k, d in seen if k == "message"]
    assert "late news" in messages and messages[-1] == "succeeded"
    engine.dispose()


def test_with_redis_unreachable_commits_succeed_and_streams_poll(world, live_server):
    settings, engine, auth = world(stream_poll_s=0.05, wakeup_url=DEAD_REDIS)
    url = live_server(create_app(settings))
    publisher = Publisher(DEAD_REDIS)
    worker = attach(make_sessionmaker(engine), publisher)
    job = seed_job(worker, settings, _key(auth), finish=None)
    assert publisher.muted_until > time.monotonic()  # it failed once, then stopped trying for a while
    seen: list = []
    with httpx.stream("GET", f"{url}/v1/jobs/{job}/events/stream", headers=auth, timeout=30) as r:
        for kind, data, _ in parse(r.iter_lines()):
            seen.append((kind, data))
            if kind == "job" and len([k for k, _ in seen if k == "job"]) == 1:
                with worker() as s:
                    store.add_event(s, job, "log", "late news", stage="evaluate")
                    states.finish(s, job, s.get(Job, job).lease_token, "succeeded")
            if kind == "end":
                break
    messages = [json.loads(d)["message"] for k, d in seen if k == "message"]
    assert "late news" in messages and messages[-1] == "succeeded"
    engine.dispose()
