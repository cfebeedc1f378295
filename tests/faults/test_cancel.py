"""Cancel through a real worker: while queued (cancelled at once; its delivery is dropped), while
running (running -> cancelling -> cancelled at the worker's next checkpoint), after success (409)."""

from __future__ import annotations

import pytest
from faultlib import cluster_factory, deadline, hard_timeout, redis_server, tiny_model, wait_until  # noqa: F401

pytestmark = pytest.mark.slow


@deadline(120)
def test_cancel_queued_running_and_succeeded(pg_url, redis_server, cluster_factory):
    c = cluster_factory(pg_url, redis_server.url)
    auth = c.auth()
    running = c.submit(auth, "cancel-running", fault="hold")
    queued = c.submit(auth, "cancel-queued", seed=1)
    c.start_worker()
    c.wait_held(running)

    # queued -> cancelled at once; the worker drops its message when it gets to it
    resp = c.client.post(f"/v1/jobs/{queued}/cancel", headers=auth)
    assert resp.status_code == 200 and resp.json()["status"] == "cancelled", resp.text

    # running -> cancelling; the worker stops at its next checkpoint and records cancelled
    resp = c.client.post(f"/v1/jobs/{running}/cancel", headers=auth)
    assert resp.status_code == 200 and resp.json()["status"] == "cancelling", resp.text
    assert c.client.post(f"/v1/jobs/{running}/cancel", headers=auth).json()["status"] == "cancelling"  # idempotent
    c.release(running)
    job = c.wait_status(auth, running, timeout=60)
    assert job["status"] == "cancelled" and job["error"] is None, job
    assert [e["data"]["status"] for e in c.events(auth, running) if e["kind"] == "status"] == [
        "queued", "running", "cancelling", "cancelled"]
    assert c.recorded("publish.log", running) == 0 and c.recorded("runs.log", running, "end") == 0
    assert not (c.settings.home / "jobs" / running).exists()  # its scratch directory went with it

    wait_until(lambda: f"job {queued}: delivery dropped: already cancelled" in c.log("worker"), 30,
               "the cancelled job's delivery to be dropped")
    assert c.recorded("runs.log", queued) == 0 and c.job(auth, queued)["attempt"] == 0

    # succeeded -> 409, and it stays succeeded
    done = c.submit(auth, "cancel-done", seed=2)
    assert c.wait_status(auth, done, timeout=60)["status"] == "succeeded"
    resp = c.client.post(f"/v1/jobs/{done}/cancel", headers=auth)
    assert resp.status_code == 409 and resp.headers["content-type"].startswith("application/problem+json")
    assert resp.json()["type"].endswith("/invalid-job-state")
    assert c.job(auth, done)["status"] == "succeeded"
