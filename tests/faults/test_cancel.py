"""Cancel through a real worker: while queued (cancelled at once; its delivery is dropped), while
running (running -> cancelling -> cancelled at the worker's next checkpoint), after success (409)."""

from __future__ import annotations

import pytest
from faultlib import deadline, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("hard_timeout")]


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
        "queued",
        "running",
        "cancelling",
        "cancelled",
    ]
    assert c.recorded("publish.log", running) == 0 and c.recorded("runs.log", running, "end") == 0
    assert not (c.settings.home / "jobs" / running).exists()  # its scratch directory went with it

    wait_until(
        lambda: f"job {queued}: delivery dropped: already cancelled" in c.log("worker"),
        30,
        "the cancelled job's delivery to be dropped",
    )
    assert c.recorded("runs.log", queued) == 0 and c.job(auth, queued)["attempt"] == 0

    # succeeded -> 409, and it stays succeeded
    done = c.submit(auth, "cancel-done", seed=2)
    assert c.wait_status(auth, done, timeout=60)["status"] == "succeeded"
    resp = c.client.post(f"/v1/jobs/{done}/cancel", headers=auth)
    assert resp.status_code == 409 and resp.headers["content-type"].startswith("application/problem+json")
    assert resp.json()["type"].endswith("/invalid-job-state")
    assert c.job(auth, done)["status"] == "succeeded"


@deadline(150)
def test_a_cancel_before_publishing_wins_and_one_after_is_refused(pg_url, redis_server, cluster_factory):
    """Issue 24 §3: the publish stage begins with one compare-and-set (states.begin_publish). A cancel that
    comes first ends the job cancelled with nothing published; one that comes after is a 409 and the job
    succeeds with its output served."""
    c = cluster_factory(pg_url, redis_server.url)
    auth = c.auth()
    early = c.submit(auth, "cancel-early", fault="hold-before-publish")
    late = c.submit(auth, "cancel-late", fault="hold-publishing", seed=1)
    c.start_worker()

    # held in the publish stage, before publishing began: the cancel wins
    c.wait_held(early)
    assert c.job(auth, early)["stage"] == "publish"
    resp = c.client.post(f"/v1/jobs/{early}/cancel", headers=auth)
    assert resp.status_code == 200 and resp.json()["status"] == "cancelling", resp.text
    c.release(early)
    job = c.wait_status(auth, early, timeout=60)
    assert job["status"] == "cancelled" and job["artifacts"] == [], job
    assert c.recorded("publish.log", early) == 0
    assert not (c.settings.publish_dir / "faults" / "cancel-early").exists()
    files = c.client.get(f"/v1/jobs/{early}/outputs/1/files", headers=auth)
    assert files.status_code == 404, files.text

    # held just after publishing began: the cancel is refused, the job publishes and succeeds
    c.wait_held(late)
    resp = c.client.post(f"/v1/jobs/{late}/cancel", headers=auth)
    assert resp.status_code == 409 and resp.headers["content-type"].startswith("application/problem+json"), resp.text
    assert resp.json()["type"].endswith("/job-publishing") and "cancel not possible" in resp.json()["detail"]
    assert c.job(auth, late)["status"] == "running" and not c.job(auth, late)["cancel_requested"]
    c.release(late)
    job = c.wait_status(auth, late, timeout=60)
    assert job["status"] == "succeeded" and len(job["artifacts"]) == 1, job
    assert (c.settings.publish_dir / "faults" / "cancel-late" / "config.json").is_file()
    assert c.client.get(f"/v1/jobs/{late}/outputs/1/files", headers=auth).status_code == 200
