"""Commit, then enqueue, against real brokers: Redis (the docker-compose broker) and the embedded
kombu SQLAlchemy transport on SQLite, consumed by a real Celery worker process."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import redis
from fastapi.testclient import TestClient
from sqlalchemy import select
from testkit.service_lib import body, decode_message

from service.api import create_app
from service.core.celery_app import default_queue, make_celery
from service.core.db import make_engine, make_sessionmaker
from service.core.models import Job
from service.jobs.queue import dispatch_queued

HERE = Path(__file__).parent
REPO = HERE.parents[2]


def test_message_reaches_redis_only_after_the_row_is_committed(db_url, settings_for, redis_queue, auth):
    broker, queue, r = redis_queue
    settings = settings_for(db_url, broker_url=broker, queue_name=queue)
    seen: dict = {}
    reader = make_sessionmaker(make_engine(settings))  # another connection, like a worker's

    def consume():
        # Like a worker: block on the queue; the moment the message arrives, read the row.
        # the CPU class's queue (a Hub model the API could not size); a socket timeout above brpop's own
        item = redis.Redis.from_url(broker, socket_timeout=30).brpop([default_queue(settings)], timeout=20)
        if item is None:
            return
        seen["message"] = decode_message(item[1])
        job_id = seen["message"]["args"][0]
        with reader() as s:
            row = s.get(Job, job_id)
            seen["status"] = row.status if row else None

    t = threading.Thread(target=consume)
    t.start()
    with TestClient(create_app(settings)) as c:
        resp = c.post("/v1/jobs", json=body(), headers=auth)
    t.join(timeout=30)
    assert resp.status_code == 201
    assert seen["message"] == {"task": "nbl.run_job", "args": [resp.json()["id"]], "kwargs": {}}
    assert seen["status"] == "queued"  # the row existed, committed, when the message could be taken
    assert r.llen(default_queue(settings)) == 0


def test_broker_down_still_201_then_the_reconciler_dispatches(db_url, settings_for, redis_queue, auth):
    broker, queue, r = redis_queue
    down = settings_for(db_url, broker_url="redis://127.0.0.1:1/0", queue_name=queue, publish_timeout_s=0.5)
    with TestClient(create_app(down)) as c:
        t0 = time.monotonic()
        resp = c.post("/v1/jobs", json=body(), headers=auth)
        assert resp.status_code == 201 and time.monotonic() - t0 < 10
        assert resp.json()["status"] == "queued"
    job_id = resp.json()["id"]
    sessions = make_sessionmaker(make_engine(down))
    with sessions() as s:
        assert s.get(Job, job_id).dispatched_at is None

    up = settings_for(db_url, broker_url=broker, queue_name=queue)
    celery = make_celery(up)
    with sessions() as s:
        assert dispatch_queued(s, celery) == [job_id]
        assert dispatch_queued(s, celery) == []  # dispatched now: not sent twice
        assert s.scalar(select(Job.dispatched_at).where(Job.id == job_id)) is not None
    celery.close()
    messages = [decode_message(m) for m in r.lrange(default_queue(up), 0, -1)]
    assert messages == [{"task": "nbl.run_job", "args": [job_id], "kwargs": {}}]
