"""The team's disk quota through a real worker (issue 24 §15): a job that fitted at submit but whose outputs would
take the team over NBL_TEAM_DISK_QUOTA_BYTES at publish (another output arrived meanwhile) fails as `user`
before anything is written; the next submit is refused from its estimate."""

from __future__ import annotations

import pytest
from faultlib import deadline, job_body

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("hard_timeout")]


@deadline(150)
def test_a_job_over_the_quota_at_publish_fails_user_and_publishes_nothing(pg_url, redis_server, cluster_factory):
    quota = 10**9
    c = cluster_factory(pg_url, redis_server.url, NBL_TEAM_DISK_QUOTA_BYTES=str(quota))
    auth = c.auth()
    job_id = c.submit(auth, "over-quota", fault="hold")  # its estimate fits: accepted
    c.start_worker()
    c.wait_held(job_id)
    filler = c.settings.publish_dir / "faults" / "filler"  # meanwhile the team's other outputs fill the quota
    filler.mkdir(parents=True)
    with open(filler / "model.safetensors", "wb") as f:  # sparse: counted by size, nothing on the disk
        f.truncate(quota)
    c.release(job_id)

    job = c.wait_status(auth, job_id, timeout=90)
    assert job["status"] == "failed" and job["error"]["type"] == "user", job
    message = job["error"]["message"]
    assert message.startswith("QuotaExceeded: publishing 'over-quota': ") and "NBL_TEAM_DISK_QUOTA_BYTES" in message
    assert f"its outputs use {quota} bytes (1.0 GB) now" in message
    assert job["artifacts"] == [] and c.recorded("publish.log", job_id) == 0
    assert sorted(p.name for p in (c.settings.publish_dir / "faults").iterdir()) == ["filler"]

    resp = c.client.post("/v1/jobs", json=job_body("next"), headers=auth)
    assert resp.status_code == 422 and resp.json()["errors"][0]["type"] == "disk_quota_exceeded", resp.text
    assert resp.json()["errors"][0]["used_bytes"] == quota
