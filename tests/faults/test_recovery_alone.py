"""Recovery with no `nbl reconcile` process, on the embedded default (SQLite database, SQLite
broker), where it once failed: a whole `nbl worker` SIGKILLed mid-job and restarted alone finishes
the job, and `nbl serve` alone requeues a job whose worker is gone. Both run the reconcile loop
(service/jobs/reconcile_loop.py); leases of 5 s and passes every 0.5 s, so this takes seconds.

The SQLite broker never re-delivers a message its taker did not acknowledge: only a reconcile pass
(the lease expired -> queued again -> sent again) can bring that job back.
"""

from __future__ import annotations

import sys
from datetime import timedelta

import pytest
from faultlib import EMBEDDED, deadline, free_port, wait_until
from sqlalchemy import select, update

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("hard_timeout")]


@deadline(150)
def test_whole_worker_killed_then_nbl_worker_alone_finishes_the_job(cluster_factory):
    c = cluster_factory(EMBEDDED, EMBEDDED)
    auth = c.auth()
    job_id = c.submit(auth, "worker-killed", fault="hold")
    worker = c.start_worker()
    held_pid = c.wait_held(job_id)
    # solo on SQLite: the job runs in `nbl worker`'s own process, never in a forked child (worker/host/pool.py)
    assert held_pid == worker.pid
    c.kill("worker")  # the whole process group
    c.release(job_id)
    c.start_worker("worker2")  # and nothing else: no `nbl reconcile`
    job = c.wait_status(auth, job_id, timeout=120)

    assert job["status"] == "succeeded", job
    assert job["attempt"] == 2 and set(c.procs) == {"worker2"}
    assert c.recorded("runs.log", job_id, "start") == 2 and c.recorded("runs.log", job_id, "end") == 1
    assert c.recorded("publish.log", job_id) == 1 and len(job["artifacts"]) == 1
    requeued = [e for e in c.events(auth, job_id) if (e["data"] or {}).get("reason") == "worker lost"]
    assert [e["data"] for e in requeued] == [
        {"status": "queued", "reason": "worker lost", "attempt": 1, "stage": "calibrate"}
    ]


@deadline(90)
def test_nbl_serve_alone_requeues_a_job_whose_worker_is_gone(cluster_factory):
    from testkit.service_lib import sqla_broker_messages

    from service.core.db import make_engine, make_sessionmaker
    from service.core.models import Job, utcnow
    from service.jobs import lease

    c = cluster_factory(EMBEDDED, EMBEDDED)
    auth = c.auth()
    job_id = c.submit(auth, "lost")
    engine = make_engine(c.settings)
    sessions = make_sessionmaker(engine)
    with sessions() as s:  # a worker took it, then vanished with the message
        assert lease.claim_job(s, job_id, 5, max_attempts=3, owner="gone:1@x")
        s.execute(update(Job).where(Job.id == job_id).values(lease_expires_at=utcnow() - timedelta(seconds=1)))
        s.commit()
    before = [m["args"][0] for m in sqla_broker_messages(c.settings)]
    c._spawn("serve", [sys.executable, "-m", "cli.main", "serve", "--port", str(free_port())])

    def requeued():
        with sessions() as s:
            status = s.scalar(select(Job.status).where(Job.id == job_id))
        return status == "queued" and [m["args"][0] for m in sqla_broker_messages(c.settings)].count(
            job_id
        ) > before.count(job_id)

    try:
        wait_until(requeued, 60, "nbl serve's reconcile loop to requeue and re-send the job", every=0.2)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{c.logs_tail()}") from None
    engine.dispose()
