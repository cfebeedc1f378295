"""GET /v1/jobs/{id} and GET /v1/jobs answer from JSON rendered once per version of a job
(service/jobs/read_cache.py): every change a worker or the API writes shows in the next read, on
SQLite and Postgres, and the body is the JobOut the view builds, as FastAPI's response_model wrote it."""

from __future__ import annotations

from sqlalchemy import null, update
from testkit.service_lib import assert_problem, body

from service.core.models import Job
from service.estimates.store import keep_estimate
from service.jobs import lease, store
from service.jobs.responses import JobList, JobOut
from service.jobs.views import job_view, job_views


def _read(client, auth, job_id):
    r = client.get(f"/v1/jobs/{job_id}", headers=auth)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    return r.json()


def test_every_write_shows_in_the_next_read(client, auth, sessions):
    job_id = client.post("/v1/jobs", json=body(k=[2, 4]), headers=auth).json()["id"]
    first = _read(client, auth, job_id)
    assert _read(client, auth, job_id) == first  # cached, same answer
    with sessions() as s:
        token = lease.claim_job(s, job_id, 60)
    assert _read(client, auth, job_id)["status"] == "running"
    with sessions() as s:
        store.set_progress(s, job_id, "calibrate", 0.3, eta=12, lease_token=token)
    seen = _read(client, auth, job_id)
    assert (seen["stage"], seen["progress"], seen["eta_seconds"]) == ("calibrate", 0.3, 12)
    with sessions() as s:
        store.add_event(s, job_id, "warning", "too few calibration tokens")  # a row of its own, not the job's
    assert _read(client, auth, job_id)["warnings"][-1] == "too few calibration tokens"
    with sessions() as s:
        store.save_artifact(s, job_id, 2, "model", "/tmp/out/k2", lease_token=token)
    assert [a["k"] for a in _read(client, auth, job_id)["artifacts"]] == [2]
    with sessions() as s:  # publishing again rewrites the same row: its created_at moves
        store.save_artifact(s, job_id, 2, "hub", "https://huggingface.co/org/m", revision="main", lease_token=token)
        store.save_artifact(s, job_id, 2, "hub", "https://huggingface.co/org/m2", revision="main", lease_token=token)
    assert {a["uri"] for a in _read(client, auth, job_id)["artifacts"]} >= {"https://huggingface.co/org/m2"}
    with sessions() as s:
        store.save_metrics(s, job_id, "base", {"perplexity/wikitext2/ppl": 20.0}, lease_token=token)
    assert _read(client, auth, job_id)["result"]["base"]["perplexity"]["wikitext2"]["ppl"] == 20.0
    with sessions() as s:
        s.execute(update(Job).where(Job.id == job_id).values(estimate=null()))  # as a Hub model's job has none
        s.commit()
        keep_estimate(s, job_id, {"worker_class": "cpu"})  # the worker's estimate of a Hub model
    listed = client.get("/v1/jobs", headers=auth).json()["data"][0]
    assert _read(client, auth, job_id)["estimate"] == {"worker_class": "cpu"} == listed["estimate"]
    assert client.post(f"/v1/jobs/{job_id}/cancel", headers=auth).json()["status"] == "cancelling"
    assert _read(client, auth, job_id)["cancel_requested"] is True
    assert client.get("/v1/jobs", headers=auth).json()["data"][0]["cancel_requested"] is True


def test_the_body_is_the_views_own(client, auth, sessions):
    ids = [client.post("/v1/jobs", json=body(metadata={"n": str(i)}), headers=auth).json()["id"] for i in range(3)]
    with sessions() as s:
        store.add_event(s, ids[0], "warning", "é ünïcode ✓")  # not escaped, as FastAPI's JSONResponse wrote it
        jobs = [s.get(Job, i) for i in reversed(ids)]
        one = JobOut.model_validate(job_view(s, jobs[-1])).model_dump(mode="json")
        page = JobList(data=job_views(s, jobs[:2]), has_more=True, next_cursor=None).model_dump(mode="json")
    assert _read(client, auth, ids[0]) == one
    r = client.get("/v1/jobs?limit=2", headers=auth)
    assert "é ünïcode ✓".encode() in client.get(f"/v1/jobs/{ids[0]}", headers=auth).content
    got = r.json()
    assert got["next_cursor"] and {**got, "next_cursor": None} == page
    rest = client.get("/v1/jobs", params={"limit": 2, "after": got["next_cursor"]}, headers=auth).json()
    assert [j["id"] for j in rest["data"]] == [ids[0]] and rest["has_more"] is False and rest["next_cursor"] is None


def test_the_cache_is_per_team_and_bounded(client, auth, team_key):
    job_id = client.post("/v1/jobs", json=body(), headers=auth).json()["id"]
    assert _read(client, auth, job_id)["id"] == job_id
    other = team_key("beta")
    assert client.get(f"/v1/jobs/{job_id}", headers=other).status_code == 404  # cached, still not theirs
    assert client.get("/v1/jobs", headers=other).json()["data"] == []
    cache = client.app.state.rendered_jobs
    cache.capacity = 1
    second = client.post("/v1/jobs", json=body(), headers=auth).json()["id"]
    assert _read(client, auth, second)["id"] == second and _read(client, auth, job_id)["id"] == job_id
    assert len(cache._items) == 1


def test_a_bad_key_is_a_401_before_any_422(client, auth):
    """The reads check their key in the route (one threadpool hop), yet answer as a dependency did."""
    bad = {"Authorization": "Bearer nbl_not-a-real-key"}
    for path in ("/v1/jobs?limit=0", "/v1/jobs?stauts=failed", "/v1/jobs?after=x", "/v1/jobs/nope", "/v1/jobs/job_x"):
        assert_problem(client.get(path, headers=bad), 401, "unauthorized")
        assert_problem(client.get(path), 401, "unauthorized")
    assert_problem(client.get("/v1/jobs?limit=0", headers=auth), 422, "validation-error")
    assert_problem(client.get("/v1/jobs?stauts=failed", headers=auth), 422, "validation-error")
    assert_problem(client.get("/v1/jobs?after=x", headers=auth), 422, "validation-error")
    assert_problem(client.get("/v1/jobs/nope", headers=auth), 404, "not-found")
    assert_problem(client.get("/v1/jobs?metadata.a=%00", headers=bad), 422, "validation-error")  # NUL: first, as ever
