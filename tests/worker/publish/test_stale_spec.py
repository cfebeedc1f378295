"""A job whose stored request no longer validates (queued before a rule tightened, e.g. a dataset name
refused since) ends `failed` as a `user` error when a worker claims it; it never stays `running`."""

from __future__ import annotations

from sqlalchemy import select, update
from test_job_outputs import JOB

from service.core.models import Job


def test_a_stored_request_that_no_longer_validates_fails_the_job_as_user(here):
    from worker import tasks

    _, client, auth, _, _ = here()
    resp = client.post("/v1/jobs", json=JOB, headers=auth["alpha"])
    assert resp.status_code == 201, resp.text
    job_id = resp.json()["id"]
    with tasks.sessions()() as s:
        spec = dict(s.scalar(select(Job.spec).where(Job.id == job_id)))
        spec["calibration"] = {**spec["calibration"], "dataset": "csv"}  # refused since this job was queued
        s.execute(update(Job).where(Job.id == job_id).values(spec=spec))
        s.commit()

    assert tasks.run_job(job_id) == "failed"
    job = client.get(f"/v1/jobs/{job_id}", headers=auth["alpha"]).json()
    assert job["status"] == "failed"
    assert job["error"]["type"] == "user", job["error"]
    assert "csv" in job["error"]["message"]
