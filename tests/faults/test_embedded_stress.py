"""The embedded default under load: 300 jobs through the real API into the SQLite broker, consumed by
the real `nbl worker` (no fault hooks) on the SQLite database, submitted while the worker runs, so
the API writes the broker as the worker polls it. Every job must end, each on its first attempt.

This is where a prefork child once deadlocked (in about 370 jobs): forked while the parent held
SQLite's mutex, it hung in lease.claim_job and every later job stayed queued. `nbl worker` now runs
the solo pool on SQLite (worker/host/pool.py): every job's lease names the worker's own pid.

The mix keeps it cheap on 2 cores while every job takes the whole claim path (dispatch, delivery,
lease.claim_job, the spec, states.finish): one job in 60 runs the whole pipeline on the tiny model,
with the fresh-process load check (seconds each); the others ask to publish to the Hub with no
token, which the worker refuses right after claiming the job (a `user` failure, no model loaded).
"""

from __future__ import annotations

import time

import pytest
from faultlib import EMBEDDED, JOB, deadline, wait_until
from sqlalchemy import func, select

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("hard_timeout")]

JOBS, FULL_EVERY = 300, 60
FAST = {**JOB, "publish": {"repo_id": "stress/no-token"}}


@deadline(300)
def test_300_jobs_on_the_embedded_default_all_end_on_their_first_attempt(cluster_factory):
    from service.core.db import make_engine, make_sessionmaker
    from service.core.models import Job

    c = cluster_factory(
        EMBEDDED, EMBEDDED, NBL_MAX_ACTIVE_JOBS_PER_TEAM="1000", NBL_LEASE_SECONDS="60", NBL_RECONCILE_INTERVAL="5"
    )
    auth = c.auth()
    worker = c.start_nbl_worker()
    started = time.monotonic()
    full: list[str] = []
    for i in range(JOBS):
        body = {**JOB, "publish": {"local_dir": f"stress-{i}"}} if i % FULL_EVERY == 0 else FAST
        resp = c.client.post("/v1/jobs", json=body, headers=auth)
        assert resp.status_code == 201, resp.text
        if i % FULL_EVERY == 0:
            full.append(resp.json()["id"])

    engine = make_engine(c.settings)
    sessions = make_sessionmaker(engine)

    def by_status() -> dict[str, int]:
        assert worker.poll() is None, f"nbl worker exited ({worker.returncode})\n{c.logs_tail()}"
        with sessions() as s:
            return dict(s.execute(select(Job.status, func.count()).group_by(Job.status)).all())

    try:
        wait_until(lambda: set(by_status()) <= {"succeeded", "failed"}, 240, "every job to end", every=1)
    except AssertionError as e:
        raise AssertionError(f"{e}: {by_status()}\n{c.logs_tail()}") from None
    print(f"{JOBS} jobs ended {time.monotonic() - started:.1f} s after the first was submitted")

    with sessions() as s:
        rows = s.execute(select(Job.id, Job.status, Job.attempt, Job.error_type, Job.lease_owner)).all()
    assert len(rows) == JOBS
    assert {r.id: r.status for r in rows if r.id in full} == dict.fromkeys(full, "succeeded")
    assert {(r.status, r.error_type) for r in rows if r.id not in full} == {("failed", "user")}
    assert {r.attempt for r in rows} == {1}  # nothing was lost, retried or taken over
    # every job ran in `nbl worker`'s own process: nothing was forked to run it
    assert {r.lease_owner.rpartition("@")[0].rpartition(":")[2] for r in rows} == {str(worker.pid)}
    engine.dispose()
