"""The database goes away mid-job: a private Postgres cluster is stopped while a job is running and
started again. Meanwhile the API answers 503 + Retry-After (problem+json), never 500, and /readyz
says not ready; the worker's writes wait for the database instead of failing the job; afterwards
the API answers 2xx again and the job succeeds on its first attempt.
"""

from __future__ import annotations

import pytest
from faultlib import deadline, job_body, private_postgres, wait_until

from service.core import migrate

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("hard_timeout")]


def assert_503(resp) -> None:
    assert resp.status_code == 503, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert int(resp.headers["retry-after"]) > 0
    assert resp.json()["type"] == "tag:nbl-service,2025:problems/database-unavailable"


@deadline(150)
def test_postgres_restart_mid_job(redis_server, cluster_factory):
    with private_postgres() as pg:
        migrate.upgrade(pg.url)
        # Heartbeats every 5 s: the outage below spans one; the lease outlives the outage.
        c = cluster_factory(pg.url, redis_server.url, NBL_LEASE_SECONDS="15")
        auth = c.auth()
        job_id = c.submit(auth, "pg-restart", fault="hold")
        c.start_worker()
        c.start_reconciler()
        c.wait_held(job_id)

        pg.stop()
        assert_503(c.client.get(f"/v1/jobs/{job_id}", headers=auth))
        assert_503(c.client.post("/v1/jobs", json=job_body("during-outage"), headers=auth))
        assert_503(c.client.get("/v1/jobs", headers=auth))
        ready = c.client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["checks"]["database"] != "ok"
        c.release(job_id)  # the job's next progress write meets the outage
        wait_until(
            lambda: "set_progress: database unavailable" in c.log("worker"),
            30,
            "the worker's progress write to wait for the database",
        )
        wait_until(
            lambda: f"job {job_id}: heartbeat failed" in c.log("worker"),
            30,
            "the heartbeat to meet the outage (and carry on)",
        )
        pg.start()

        wait_until(
            lambda: c.client.get(f"/v1/jobs/{job_id}", headers=auth).status_code == 200, 30, "the API to answer again"
        )
        job = c.wait_status(auth, job_id, timeout=60)
        assert job["status"] == "succeeded" and job["attempt"] == 1, job
        assert c.recorded("publish.log", job_id) == 1 and len(job["artifacts"]) == 1
        assert c.client.post("/v1/jobs", json=job_body("after-outage"), headers=auth).status_code == 201
        assert c.client.get("/readyz").status_code == 200
        assert "abandoning this attempt" not in c.log("worker")
        assert "reconciler pass failed" in c.log("reconciler")  # it rode out the outage too
        c.close()  # before the server stops
