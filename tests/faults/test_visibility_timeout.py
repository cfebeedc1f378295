"""A job that outlives the broker's visibility timeout, with two workers: Redis hands the running
task's message to the second worker, whose claim finds the job under the first worker's live lease
and drops the delivery. The job runs once.

The Settings refuse a visibility timeout shorter than the task time limit (>= 60 s) precisely to
avoid this re-delivery, so the fault worker sets Redis' transport options directly: a 2 s visibility
timeout, swept every second. That is the fault: a deployment whose timeout is too short, or a job
that outlives it.
"""

from __future__ import annotations

import json

import pytest
from faultlib import deadline, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("hard_timeout")]

SHORT_VISIBILITY = json.dumps({"visibility_timeout": 2, "unacked_restore_interval": 1, "unacked_restore_throttle": 1})


@deadline(120)
def test_job_outliving_the_visibility_timeout_runs_once(pg_url, redis_server, cluster_factory):
    c = cluster_factory(pg_url, redis_server.url, NBL_FAULT_TRANSPORT_OPTIONS=SHORT_VISIBILITY)
    auth = c.auth()
    job_id = c.submit(auth, "outlives-visibility", fault="hold")
    c.start_worker("worker-a")
    holder = c.wait_held(job_id)
    c.start_worker("worker-b")
    # Redis re-delivers the unacknowledged message once it is 2 s old; worker b gets it (a is busy).
    dropped = f"job {job_id}: delivery dropped: running under a live lease held by "
    wait_until(lambda: dropped in c.log("worker-b"), 60, "worker b to receive and drop the re-delivered message")
    assert f":{holder}@" in c.log("worker-b").split(dropped)[1].splitlines()[0]  # a's child holds it
    c.release(job_id)
    job = c.wait_status(auth, job_id, timeout=60)

    assert job["status"] == "succeeded", job
    assert job["attempt"] == 1
    assert c.recorded("runs.log", job_id, "start") == 1 and c.recorded("runs.log", job_id, "end") == 1
    assert c.recorded("publish.log", job_id) == 1 and len(job["artifacts"]) == 1
    assert dropped not in c.log("worker-a")
