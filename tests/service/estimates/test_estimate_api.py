"""POST /v1/estimates, and the estimate every job stores: placed on its class, refused when none holds it."""

from __future__ import annotations

from sqlalchemy import select
from testkit.model_configs import HUGE, LLAMA_8B, TINY, write_config
from testkit.service_lib import assert_problem

from service.core.models import Job

TINY_JOB = {"model": {"id": "local:tiny"}, "calibration": {"num_samples": 8, "seq_len": 32}, "compression": {"k": 1}}


def test_estimate_answers_without_creating_a_job(settings, client, auth, sessions):
    write_config(settings.models_dir / "tiny", TINY)
    resp = client.post("/v1/estimates", json=TINY_JOB, headers=auth)
    assert resp.status_code == 200, resp.text
    est = resp.json()
    assert est["worker_class"] == "nbl-cpu" and est["devices"] == ["cpu"] and est["device_bytes"] == 0
    assert est["host_bytes"] > 0 and est["disk_bytes"] == sum(est["disk"].values())
    # a job saves its outputs, reloads each in a fresh process and evaluates the base and each (no measured selection)
    assert set(est["phases"]) == {"calibrate", "save", "check", "evaluate"}
    with sessions() as s:
        assert s.scalars(select(Job)).all() == []
    assert client.post("/v1/estimates", json=TINY_JOB).status_code == 401


def test_estimate_checks_the_body_as_jobs_do(settings, client, auth):
    write_config(settings.models_dir / "tiny", TINY)
    assert_problem(
        client.post("/v1/estimates", json={**TINY_JOB, "compression": {"k": 4}}, headers=auth), 422, "validation-error"
    )  # k at the layer count
    assert_problem(
        client.post("/v1/estimates", json={**TINY_JOB, "model": {"id": "local:nope"}}, headers=auth),
        422,
        "validation-error",
    )


def test_estimate_of_an_unreachable_hub_model_is_a_503(settings, client, auth, monkeypatch):
    monkeypatch.setattr(settings, "hf_read_endpoint", "http://127.0.0.1:1")  # HF_ENDPOINT
    p = assert_problem(
        client.post("/v1/estimates", json={"model": {"id": "org/model"}, "compression": {"k": 1}}, headers=auth),
        503,
        "not-ready",
    )
    assert "cannot fetch config.json from the Hub" in p["detail"]


def test_a_job_no_class_holds_is_a_422_with_the_numbers(settings, client, auth, sessions):
    write_config(settings.models_dir / "huge", HUGE)
    job = {**TINY_JOB, "model": {"id": "local:huge"}}
    p = assert_problem(client.post("/v1/jobs", json=job, headers=auth), 422, "validation-error")
    assert p["detail"].startswith("no worker class can run this job: the job needs ")
    assert "GB of memory on one device, over the 85.9 GB of each device of gpu-8x80g" in p["detail"]
    assert p["errors"][0]["estimate"]["device_bytes"] > 85.9e9
    with sessions() as s:
        assert s.scalars(select(Job)).all() == []
    est = client.post("/v1/estimates", json=job, headers=auth).json()  # the same figures, no refusal status
    assert est["worker_class"] is None and est["refusal"] in p["detail"]


def test_every_job_stores_its_estimate(settings, client, auth, sessions):
    write_config(settings.models_dir / "tiny", TINY)
    write_config(settings.models_dir / "eight", LLAMA_8B)
    created = client.post("/v1/jobs", json=TINY_JOB, headers=auth).json()
    small = created["id"]
    assert created["estimate"]["worker_class"] == "nbl-cpu"  # the job shows it too
    big = client.post("/v1/jobs", json={**TINY_JOB, "model": {"id": "local:eight"}}, headers=auth).json()["id"]
    with sessions() as s:
        rows = {j.id: j.estimate for j in s.scalars(select(Job))}
    assert rows[small]["worker_class"] == "nbl-cpu"
    # an 8B model in bf16 (16 GB, x 1.25 headroom) fits one 24 GiB GPU
    assert rows[big]["worker_class"] == "nbl-gpu-24g" and rows[big]["devices"] == ["cuda:0"]
    answered = client.post("/v1/estimates", json={**TINY_JOB, "model": {"id": "local:eight"}}, headers=auth).json()
    assert {k: answered[k] for k in rows[big]} == rows[big]  # the stored figures are the API's


def test_hub_job_without_a_reachable_hub_goes_to_the_first_class(settings, client, auth, sessions, monkeypatch):
    monkeypatch.setattr(settings, "hf_read_endpoint", "http://127.0.0.1:1")  # HF_ENDPOINT
    resp = client.post("/v1/jobs", json={"model": {"id": "org/model"}, "compression": {"k": 1}}, headers=auth)
    assert resp.status_code == 201
    with sessions() as s:
        assert s.get(Job, resp.json()["id"]).estimate is None  # the worker checks it against its own devices
