"""Workers that die: a pool child SIGKILLed mid-calibration, a whole worker SIGKILLed and restarted,
a poison job that kills every worker that runs it. Real `nbl worker` processes (prefork) on a
private Redis, the shared Postgres, and `nbl reconcile`; leases of 5 s, so a lost worker is noticed
in seconds.

The Redis server is this test's own: a SIGKILLed worker leaves its message in Redis' `unacked` set,
which every worker on that Redis database sweeps, and the shared one is in use by other tests.
"""

from __future__ import annotations

import pytest
from faultlib import deadline

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("hard_timeout")]


@deadline(150)
def test_child_killed_mid_calibration_succeeds_on_attempt_2(pg_url, redis_server, cluster_factory):
    # A lease far longer than the recovery: the retry must not wait for it to expire.
    c = cluster_factory(pg_url, redis_server.url, NBL_LEASE_SECONDS="60")
    auth = c.auth()
    job_id = c.submit(auth, "killed-once", fault="kill-once")
    c.start_worker()
    c.start_reconciler()
    job = c.wait_status(auth, job_id, timeout=120)

    assert job["status"] == "succeeded", job
    assert job["attempt"] == 2
    assert c.recorded("kills.log", job_id) == 1
    assert c.recorded("runs.log", job_id, "end") == 1
    assert c.recorded("publish.log", job_id) == 1 and len(job["artifacts"]) == 1
    # Celery's parent re-queued the dead child's message at once (task_reject_on_worker_lost); the
    # next child found the job leased to a pid gone from this host and took it over.
    assert f"job {job_id}: taken over from " in c.log("worker")
    events = c.events(auth, job_id)
    assert [e["data"]["attempt"] for e in events if (e["data"] or {}).get("status") == "running"] == [1, 2]
    killed_at = float((c.fault_dir / "kills.log").read_text().split("@")[-1])
    retried_at = [e for e in events if (e["data"] or {}).get("attempt") == 2][0]["created_at"]
    print(f"recovered {_unix(retried_at) - killed_at:.1f} s after the kill")


def _unix(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


@deadline(150)
def test_whole_worker_killed_then_restarted_runs_the_job_once_more(pg_url, redis_server, cluster_factory):
    c = cluster_factory(pg_url, redis_server.url)
    auth = c.auth()
    job_id = c.submit(auth, "worker-killed", fault="hold")
    c.start_worker()
    c.wait_held(job_id)
    c.kill("worker")  # parent and child at once: nothing is re-queued by Celery
    c.release(job_id)  # the next attempt runs through
    c.start_worker("worker2")
    c.start_reconciler()
    job = c.wait_status(auth, job_id, timeout=120)

    assert job["status"] == "succeeded", job
    assert job["attempt"] == 2
    assert c.recorded("runs.log", job_id, "start") == 2  # the killed one, and one more
    assert c.recorded("runs.log", job_id, "end") == 1
    assert c.recorded("publish.log", job_id) == 1 and len(job["artifacts"]) == 1
    requeued = [e for e in c.events(auth, job_id) if (e["data"] or {}).get("reason") == "worker lost"]
    assert [e["data"] for e in requeued] == [
        {"status": "queued", "reason": "worker lost", "attempt": 1, "stage": "calibrate"}
    ]


@deadline(150)
def test_poison_job_fails_after_max_attempts_and_the_next_job_runs(pg_url, redis_server, cluster_factory):
    c = cluster_factory(pg_url, redis_server.url)  # NBL_MAX_ATTEMPTS=3
    auth = c.auth()
    poison = c.submit(auth, "poison", fault="kill-always", seed=1)  # never finds the next job's statistics
    after = c.submit(auth, "after-poison")
    c.start_worker()
    c.start_reconciler()
    job = c.wait_status(auth, poison, timeout=120)

    assert job["status"] == "failed", job
    assert job["error"] == {"type": "system", "message": "worker lost 3 times (last at stage calibrate)"}
    assert job["attempt"] == 3 and c.recorded("kills.log", poison) == 3
    assert c.recorded("publish.log", poison) == 0
    nxt = c.wait_status(auth, after, timeout=60)
    assert nxt["status"] == "succeeded" and nxt["attempt"] == 1, nxt
    # Deliveries after the last attempt (the message re-queued when the third child died) were dropped.
    assert c.recorded("runs.log", poison, "start") == 3 and c.job(auth, poison)["attempt"] == 3
