"""The broker goes away: Redis (without persistence) is killed with one job running and one queued,
and restarted. The running job finishes (the worker needs only the database for that), the queued
job's message is gone and the reconciler sends it again; during the outage the API still answers 201
and the job it accepted is dispatched once Redis is back; a job submitted after the restart runs too.
Each job runs exactly once.
"""

from __future__ import annotations

import time

import pytest
from faultlib import deadline, wait_until
from sqlalchemy import create_engine, select

from service.core.models import Job

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("hard_timeout")]


@deadline(150)
def test_redis_restart_with_a_running_and_a_queued_job(pg_url, redis_server, cluster_factory):
    # Queued messages older than 3 s are presumed lost and sent again (duplicates are dropped).
    c = cluster_factory(pg_url, redis_server.url, NBL_REDISPATCH_AFTER="3")
    auth = c.auth()
    running = c.submit(auth, "running", fault="hold")
    queued = c.submit(auth, "queued", seed=1)
    c.start_worker()
    c.start_reconciler()
    c.wait_held(running)
    assert c.job(auth, queued)["status"] == "queued"

    redis_server.stop()
    t0 = time.monotonic()
    resp = c.client.post(
        "/v1/jobs", json={**c.job(auth, queued)["spec"], "publish": {"local_dir": "during"}}, headers=auth
    )
    assert resp.status_code == 201 and resp.json()["status"] == "queued", resp.text
    assert time.monotonic() - t0 < 10  # a couple of quick publish retries, then the reconciler's job
    during = resp.json()["id"]
    engine = create_engine(pg_url)

    def undispatched():
        with engine.connect() as conn:
            return conn.scalar(select(Job.dispatched_at).where(Job.id == during)) is None

    # A reconcile pass may be mid-send: it claims dispatched_at before it talks to the broker and puts
    # it back when the send fails, so the row reads "not sent" once that pass gives up.
    wait_until(undispatched, timeout=20, what="the failed sends to leave the job undispatched", every=0.05)
    ready = c.client.get("/readyz")
    assert ready.status_code == 503 and ready.json()["checks"]["broker"] != "ok"

    redis_server.start()  # empty: both messages are lost
    c.release(running)
    after = c.submit(auth, "after", seed=2)
    done = {j: c.wait_status(auth, j, timeout=90) for j in (running, queued, during, after)}

    for job_id, job in done.items():
        assert job["status"] == "succeeded" and job["attempt"] == 1, job
        assert c.recorded("runs.log", job_id, "start") == 1, job_id
        assert c.recorded("publish.log", job_id) == 1 and len(job["artifacts"]) == 1, job_id
    with engine.connect() as conn:
        assert conn.scalar(select(Job.dispatched_at).where(Job.id == during)) is not None
    engine.dispose()
    assert c.client.get("/readyz").status_code == 200
