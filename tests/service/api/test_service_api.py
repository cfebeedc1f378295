"""The /v1 API on SQLite and on Postgres: creation, auth, team isolation, idempotency, validation,
cancel, pagination, events, layers, problem+json, health. Real databases, real embedded broker."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update
from testkit.service_lib import TINY_CONFIG, assert_problem, body, sqla_broker_messages

from service.core.models import ApiKey, Job, utcnow
from service.jobs import lease, states, store


def job_count(sessions) -> int:
    with sessions() as s:
        return s.scalar(select(func.count()).select_from(Job))


# --- create and read -----------------------------------------------------------------------------


def test_create_job_defaults_and_enqueue_after_commit(client, auth, settings, sessions):
    r = client.post("/v1/jobs", json=body(k=[4, 8]), headers=auth)
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["id"].startswith("job_") and len(job["id"]) == 36
    assert r.headers["location"] == f"/v1/jobs/{job['id']}"
    assert job["status"] == "queued" and job["progress"] == 0 and job["error"] is None
    spec = job["spec"]
    # The paper's defaults (C4, 256 x 2048, attention branches, NBL) but cosine ranking, which measured best.
    assert spec["calibration"] == {
        "dataset": "c4",
        "config": None,
        "split": "train",
        "text_field": "text",
        "num_samples": 256,
        "seq_len": 2048,
        "seed": 0,
        "shuffle": False,
    }
    assert spec["compression"] == {"mode": "attn", "method": "nbl", "criterion": "cosine", "k": [4, 8]}

    # One message, by task name, carrying the id of a row that is committed (read by another session).
    assert sqla_broker_messages(settings) == [{"task": "nbl.run_job", "args": [job["id"]], "kwargs": {}}]
    with sessions() as s:
        row = s.get(Job, job["id"])
        assert row.status == "queued" and row.dispatched_at is not None

    got = client.get(f"/v1/jobs/{job['id']}", headers=auth)
    assert got.status_code == 200 and got.json()["id"] == job["id"]
    assert got.json()["created_at"].endswith("Z") or "+00:00" in got.json()["created_at"]


def test_full_request_round_trips(client, auth, settings):
    (settings.models_dir / "my-model").mkdir(parents=True)  # local models are checked at submit (config.json)
    (settings.models_dir / "my-model" / "config.json").write_text(json.dumps(TINY_CONFIG))
    req = body(
        k=2,
        model="local:my-model",
        calibration={"dataset": "wikitext2", "num_samples": 8, "seq_len": 128, "seed": 3, "shuffle": True},
        evaluation={"perplexity": ["wikitext2", "c4"], "tasks": ["arc_easy"], "limit": 10, "speed": True},
        publish={"repo_id": "acme/smol-nbl", "private": False, "create_pr": True},
        metadata={"pipeline": "ci-42"},
    )
    req["compression"].update(mode="block", method="drop", criterion="cosine")
    r = client.post("/v1/jobs", json=req, headers=auth)
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["metadata"] == {"pipeline": "ci-42"}
    assert job["spec"]["publish"] == {"repo_id": "acme/smol-nbl", "private": False, "revision": None, "create_pr": True}
    assert job["spec"]["compression"] == {"mode": "block", "method": "drop", "criterion": "cosine", "k": 2}
    r = client.post("/v1/jobs", json=body(publish={"local_dir": "smol-k4"}), headers=auth)
    assert r.status_code == 201 and r.json()["spec"]["publish"] == {"local_dir": "smol-k4", "overwrite": False}


# --- auth and isolation --------------------------------------------------------------------------


@pytest.mark.parametrize("header", [None, "Bearer nbl_not-a-real-key", "Basic dXNlcjpwYXNz", "Bearer", "nbl_x"])
def test_bad_or_missing_key_is_401(client, header):
    headers = {} if header is None else {"Authorization": header}
    for r in (client.get("/v1/jobs", headers=headers), client.post("/v1/jobs", json=body(), headers=headers)):
        p = assert_problem(r, 401, "unauthorized")
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert "nbl_" not in p.get("detail", "").replace("nbl admin", "")


def test_keys_are_stored_hashed_and_revocable(client, auth, sessions):
    key = auth["Authorization"].split()[1]
    with sessions() as s:
        row = s.scalars(select(ApiKey)).one()
        assert key not in (row.key_hash, row.prefix) and key.startswith(row.prefix) and len(row.key_hash) == 64
        s.execute(update(ApiKey).values(revoked_at=utcnow()))
        s.commit()
    assert_problem(client.get("/v1/jobs", headers=auth), 401, "unauthorized")


def test_other_teams_job_is_the_same_404_as_an_unknown_one(client, team_key):
    alpha, beta = team_key("alpha"), team_key("beta")
    job_id = client.post("/v1/jobs", json=body(), headers=alpha).json()["id"]
    missing = "job_" + "0" * 32

    def shape(p):
        return {k: v for k, v in p.items() if k not in ("detail", "instance")}

    for suffix, method in (("", "get"), ("/events", "get"), ("/layers", "get"), ("/cancel", "post")):
        theirs = assert_problem(getattr(client, method)(f"/v1/jobs/{job_id}{suffix}", headers=beta), 404, "not-found")
        unknown = assert_problem(getattr(client, method)(f"/v1/jobs/{missing}{suffix}", headers=beta), 404, "not-found")
        assert shape(theirs) == shape(unknown)
    assert client.get("/v1/jobs", headers=beta).json()["data"] == []
    assert client.get(f"/v1/jobs/{job_id}", headers=alpha).json()["status"] == "queued"  # beta's cancel did nothing


# --- idempotency ---------------------------------------------------------------------------------


def test_idempotency_key_same_body_same_job(client, auth, team_key, settings, sessions):
    key = {"Idempotency-Key": "ci-run-1234"}
    first = client.post("/v1/jobs", json=body(), headers=auth | key)
    again = client.post("/v1/jobs", json=body(), headers=auth | key)
    # The defaults spelled out are the same request.
    spelled = body()
    spelled["compression"].update(mode="attn", method="nbl", criterion="cosine")
    spelled["calibration"] = {"dataset": "c4", "num_samples": 256, "seq_len": 2048}
    third = client.post("/v1/jobs", json=spelled, headers=auth | key)
    assert first.status_code == 201 and "idempotent-replayed" not in first.headers
    for r in (again, third):
        assert r.status_code == 201 and r.headers["idempotent-replayed"] == "true"
        assert r.json()["id"] == first.json()["id"]
    assert job_count(sessions) == 1
    assert len(sqla_broker_messages(settings)) == 1

    # Another team may use the same key for its own job.
    other = client.post("/v1/jobs", json=body(), headers=team_key("beta") | key)
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]


def test_idempotency_key_with_different_body_is_422(client, auth, sessions):
    key = {"Idempotency-Key": "k-1"}
    assert client.post("/v1/jobs", json=body(k=4), headers=auth | key).status_code == 201
    p = assert_problem(client.post("/v1/jobs", json=body(k=5), headers=auth | key), 422, "idempotency-key-reused")
    assert "different" in p["detail"]
    assert job_count(sessions) == 1


def test_malformed_idempotency_key_is_422(client, auth):
    assert_problem(
        client.post("/v1/jobs", json=body(), headers=auth | {"Idempotency-Key": "x" * 256}), 422, "validation-error"
    )


# --- validation ----------------------------------------------------------------------------------

BAD_BODIES = {
    "k zero": body(k=0),
    "k too large": body(k=100_000),
    "k empty list": body(k=[]),
    "k repeated": body(k=[4, 4]),
    "k as string": body(k="4"),
    "k as float": body(k=4.0),
    "unknown mode": {"model": {"id": "a/b"}, "compression": {"k": 4, "mode": "mlp"}},
    "unknown method": {"model": {"id": "a/b"}, "compression": {"k": 4, "method": "prune"}},
    "unknown criterion": {"model": {"id": "a/b"}, "compression": {"k": 4, "criterion": "magic"}},
    "unknown top-level field": body(priority="high"),
    "unknown nested field": {"model": {"id": "a/b", "trust_remote_code": True}, "compression": {"k": 4}},
    "model ../../etc": body(model="../../etc"),
    "model /etc/passwd": body(model="/etc/passwd"),
    "model file://": body(model="file:///etc/passwd"),
    "model https://": body(model="https://evil.example/model"),
    "model local path": body(model="local:../other-home"),
    "model local absolute": body(model="local:/etc"),
    "model dots": body(model="owner/..name"),
    "model three parts": body(model="a/b/c"),
    "dataset path": body(calibration={"dataset": "/data/private.jsonl"}),
    "dataset traversal": body(calibration={"dataset": "../../secrets"}),
    "num_samples zero": body(calibration={"num_samples": 0}),
    "num_samples over the server limit": body(calibration={"num_samples": 10**6}),
    "seq_len over the server limit": body(calibration={"seq_len": 10**7}),
    "publish local path": body(publish={"local_dir": "../../etc"}),
    "publish absolute": body(publish={"local_dir": "/tmp/x"}),
    "publish neither": body(publish={"private": True}),
    "publish both": body(publish={"repo_id": "a/b", "local_dir": "x"}),
    "publish repo without owner": body(publish={"repo_id": "justname"}),
    "unknown eval task": body(evaluation={"tasks": ["rm -rf"]}),
    "metadata not str": body(metadata={"a": 1}),
    "missing model": {"compression": {"k": 4}},
    "missing k": {"model": {"id": "a/b"}},
    "not an object": [1, 2, 3],
}


def test_bad_inputs_are_422_and_nothing_is_queued(client, auth, settings, sessions):
    for name, bad in BAD_BODIES.items():
        r = client.post("/v1/jobs", json=bad, headers=auth)
        p = assert_problem(r, 422, "validation-error")
        assert p["errors"] and all("loc" in e and "msg" in e for e in p["errors"]), name
    r = client.post("/v1/jobs", content=b"{not json", headers=auth | {"Content-Type": "application/json"})
    assert_problem(r, 422, "validation-error")
    assert job_count(sessions) == 0
    assert sqla_broker_messages(settings) == []


def test_server_limits_come_from_settings(db_url, settings_for, auth):
    from fastapi.testclient import TestClient

    from service.api import create_app

    with TestClient(create_app(settings_for(db_url, max_num_samples=16, max_k=3))) as c:
        small = {"num_samples": 16}
        p = assert_problem(c.post("/v1/jobs", json=body(k=4, calibration=small), headers=auth), 422, "validation-error")
        assert p["errors"][0]["loc"] == ["body", "compression", "k"]
        p = assert_problem(
            c.post("/v1/jobs", json=body(k=2, calibration={"num_samples": 17}), headers=auth), 422, "validation-error"
        )
        assert p["errors"][0]["loc"] == ["body", "calibration", "num_samples"]
        assert c.post("/v1/jobs", json=body(k=3, calibration={"num_samples": 16}), headers=auth).status_code == 201


def test_body_too_large_is_413(client, auth, sessions):
    import json

    big = body(metadata={f"k{i}": "x" * 500 for i in range(200)})
    assert_problem(client.post("/v1/jobs", json=big, headers=auth), 413, "payload-too-large")
    raw = json.dumps(big).encode()
    chunked = (raw[i : i + 4096] for i in range(0, len(raw), 4096))  # no Content-Length
    assert_problem(
        client.post("/v1/jobs", content=chunked, headers=auth | {"Content-Type": "application/json"}),
        413,
        "payload-too-large",
    )
    assert job_count(sessions) == 0


def test_team_cap_on_active_jobs(db_url, settings_for, auth, sessions):
    from fastapi.testclient import TestClient

    from service.api import create_app

    with TestClient(create_app(settings_for(db_url, max_active_jobs_per_team=2))) as c:
        ids = [c.post("/v1/jobs", json=body(), headers=auth).json()["id"] for _ in range(2)]
        assert_problem(c.post("/v1/jobs", json=body(), headers=auth), 429, "too-many-active-jobs")
        c.post(f"/v1/jobs/{ids[0]}/cancel", headers=auth)
        assert c.post("/v1/jobs", json=body(), headers=auth).status_code == 201


# --- cancel --------------------------------------------------------------------------------------


def test_cancel_queued_job(client, auth, sessions):
    job_id = client.post("/v1/jobs", json=body(), headers=auth).json()["id"]
    r = client.post(f"/v1/jobs/{job_id}/cancel", headers=auth)
    assert r.status_code == 200 and r.json()["status"] == "cancelled" and r.json()["finished_at"]
    p = assert_problem(client.post(f"/v1/jobs/{job_id}/cancel", headers=auth), 409, "invalid-job-state")
    assert "cancelled" in p["detail"]
    with sessions() as s:  # the worker's claim finds nothing to do
        assert lease.claim_job(s, job_id, 60) is None
    assert client.get(f"/v1/jobs/{job_id}", headers=auth).json()["status"] == "cancelled"


def test_cancel_running_job_goes_through_cancelling(client, auth, sessions):
    job_id = client.post("/v1/jobs", json=body(), headers=auth).json()["id"]
    with sessions() as s:
        token = lease.claim_job(s, job_id, 60)
        assert not states.cancel_requested(s, job_id)
    for _ in range(2):  # idempotent
        r = client.post(f"/v1/jobs/{job_id}/cancel", headers=auth)
        assert r.status_code == 200 and r.json()["status"] == "cancelling" and r.json()["cancel_requested"]
    with sessions() as s:
        assert states.cancel_requested(s, job_id)
        assert lease.heartbeat(s, job_id, token)  # still the worker's job until it stops
        assert states.finish(s, job_id, token, "cancelled")
    assert client.get(f"/v1/jobs/{job_id}", headers=auth).json()["status"] == "cancelled"
    assert_problem(client.post(f"/v1/jobs/{job_id}/cancel", headers=auth), 409, "invalid-job-state")


def test_cancel_finished_job_is_409(client, auth, sessions):
    job_id = client.post("/v1/jobs", json=body(), headers=auth).json()["id"]
    with sessions() as s:
        token = lease.claim_job(s, job_id, 60)
        states.finish(s, job_id, token, "failed", error_type="user", error_message="model has 30 layers, k=40")
    assert_problem(client.post(f"/v1/jobs/{job_id}/cancel", headers=auth), 409, "invalid-job-state")
    job = client.get(f"/v1/jobs/{job_id}", headers=auth).json()
    assert job["status"] == "failed" and job["error"] == {"type": "user", "message": "model has 30 layers, k=40"}


# --- listing -------------------------------------------------------------------------------------


def test_cursor_pagination_and_status_filter(client, auth, sessions):
    ids = [client.post("/v1/jobs", json=body(k=i + 1), headers=auth).json()["id"] for i in range(7)]
    seen, after, pages = [], None, 0
    while True:
        r = client.get("/v1/jobs", params={"limit": 3} | ({"after": after} if after else {}), headers=auth)
        assert r.status_code == 200
        page = r.json()
        seen += [j["id"] for j in page["data"]]
        pages += 1
        if not page["has_more"]:
            assert page["next_cursor"] is None
            break
        after = page["next_cursor"]
        assert after and "job_" not in after  # opaque
    assert pages == 3 and seen == sorted(ids, reverse=True)  # newest first, each once

    client.post(f"/v1/jobs/{ids[0]}/cancel", headers=auth)
    client.post(f"/v1/jobs/{ids[1]}/cancel", headers=auth)
    cancelled = client.get("/v1/jobs", params={"status": "cancelled"}, headers=auth).json()["data"]
    assert sorted(j["id"] for j in cancelled) == sorted(ids[:2])
    both = client.get("/v1/jobs", params=[("status", "cancelled"), ("status", "queued")], headers=auth).json()
    assert len(both["data"]) == 7
    assert len(client.get("/v1/jobs", params={"status": "queued,cancelled"}, headers=auth).json()["data"]) == 7

    assert_problem(client.get("/v1/jobs", params={"after": "garbage"}, headers=auth), 422, "validation-error")
    assert_problem(client.get("/v1/jobs", params={"status": "done"}, headers=auth), 422, "validation-error")
    assert_problem(client.get("/v1/jobs", params={"limit": 0}, headers=auth), 422, "validation-error")


# --- progress, events, layers, results -----------------------------------------------------------


def engine_scores(n_layers: int = 3) -> list[dict]:
    """Scores in the engine's format (worker/engine: `nbl compress --json`)."""

    def mode(i, base):
        return {"cca_bound": base + i, "nmse": 0.1 * i, "cosine": 0.9, "cond": 1e3, "heldout_nmse": 0.2 * i}

    return [
        {"layer": i, "attn": mode(i, 1.0) | ({"loss_rise": 0.01} if i == 0 else {}), "block": mode(i, 10.0)}
        for i in range(n_layers)
    ]


def test_events_are_ordered_and_pollable_with_after(client, auth, sessions):
    given = {"calibration": {"num_samples": 8, "seq_len": 64}, "evaluation": {"perplexity": []}}  # no submit warnings
    job_id = client.post("/v1/jobs", json=body(**given), headers=auth).json()["id"]
    with sessions() as s:
        token = lease.claim_job(s, job_id, 60)
        store.set_progress(s, job_id, "load", 0.0, lease_token=token)
        store.set_progress(s, job_id, "calibrate", 0.1, eta=120, lease_token=token)
        store.set_progress(s, job_id, "calibrate", 0.25, eta=90, lease_token=token)  # crosses 0.2: progress event
        store.set_progress(s, job_id, "calibrate", 0.27, eta=85, lease_token=token)  # same tenth: no event
        store.add_event(s, job_id, "warning", "3 of 256 blocks are shorter than seq_len", stage="calibrate")
    r = client.get(f"/v1/jobs/{job_id}/events", headers=auth)
    events = r.json()["data"]
    assert [e["kind"] for e in events] == ["status", "status", "stage", "stage", "progress", "warning"]
    assert [e["stage"] for e in events[2:]] == ["load", "calibrate", "calibrate", "calibrate"]
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)
    assert r.json()["last_id"] == events[-1]["id"] and not r.json()["has_more"]

    after = events[2]["id"]
    newer = client.get(f"/v1/jobs/{job_id}/events", params={"after": after}, headers=auth).json()
    assert [e["id"] for e in newer["data"]] == [e["id"] for e in events[3:]]
    none = client.get(f"/v1/jobs/{job_id}/events", params={"after": events[-1]["id"]}, headers=auth).json()
    assert none["data"] == [] and none["last_id"] == events[-1]["id"]
    page = client.get(f"/v1/jobs/{job_id}/events", params={"limit": 2}, headers=auth).json()
    assert len(page["data"]) == 2 and page["has_more"]

    job = client.get(f"/v1/jobs/{job_id}", headers=auth).json()
    assert job["status"] == "running" and job["stage"] == "calibrate"
    assert job["progress"] == pytest.approx(0.27) and job["eta_seconds"] == 85 and job["started_at"]
    assert job["warnings"] == ["3 of 256 blocks are shorter than seq_len"]  # the worker's warning events


def test_results_layers_metrics_artifacts(client, auth, sessions):
    job_id = client.post("/v1/jobs", json=body(k=[1, 2], publish={"local_dir": "out"}), headers=auth).json()["id"]
    with sessions() as s:
        token = lease.claim_job(s, job_id, 60)
        spec = store.job_spec(s, job_id)  # what the worker reads back
        assert spec.compression.ks == [1, 2] and spec.calibration.seq_len == 2048
        assert spec.publish.local_dir == "out" and spec.model.id == "HuggingFaceTB/SmolLM2-135M-Instruct"
        assert store.save_layer_scores(s, job_id, engine_scores(), lease_token=token)
        assert store.save_layer_scores(s, job_id, engine_scores(), lease_token=token)  # a retried stage
        assert store.set_selected_layers(
            s,
            job_id,
            [{"k": 1, "mode": "attn", "layers": [0]}, {"k": 2, "mode": "attn", "layers": [0, 1]}],
            lease_token=token,
        )
        assert store.save_metrics(s, job_id, "base", {"perplexity/wikitext2": 20.5}, lease_token=token)
        assert store.save_metrics(
            s, job_id, "k1", {"perplexity/wikitext2": 21.0, "nan": float("nan")}, lease_token=token
        )
        assert store.save_artifact(s, job_id, 1, "local", "file:///published/x/k1", lease_token=token)
        assert store.save_artifact(s, job_id, 1, "hub", "hf://acme/x", "main", "a" * 40, lease_token=token)
        assert store.save_artifact(s, job_id, 1, "hub", "hf://acme/x", "main", "b" * 40, lease_token=token)  # again
        assert states.finish(s, job_id, token, "succeeded")

    job = client.get(f"/v1/jobs/{job_id}", headers=auth).json()
    assert job["status"] == "succeeded" and job["progress"] == 1 and job["finished_at"]
    assert job["metrics"] == {"base": {"perplexity/wikitext2": 20.5}, "k1": {"perplexity/wikitext2": 21.0, "nan": None}}
    assert job["selected_layers"][1] == {"k": 2, "mode": "attn", "layers": [0, 1]}
    assert [(a["kind"], a["commit_sha"]) for a in job["artifacts"]] == [("hub", "b" * 40), ("local", None)]

    layers = client.get(f"/v1/jobs/{job_id}/layers", headers=auth).json()["data"]
    assert [entry["layer"] for entry in layers] == [0, 1, 2]
    assert layers[0]["attn"] == {
        "cca_bound": 1.0,
        "nmse": 0.0,
        "cosine": 0.9,
        "cond": 1e3,
        "heldout_nmse": 0.0,
        "loss_rise": 0.01,
    }
    assert layers[2]["block"]["cca_bound"] == 12.0 and layers[2]["block"]["loss_rise"] is None


# --- problem+json, health ------------------------------------------------------------------------


def test_unknown_routes_methods_and_internal_errors_are_problem_json(db_url, settings_for, auth):
    from fastapi.testclient import TestClient

    from service.api import create_app

    app = create_app(settings_for(db_url))

    @app.get("/v1/boom")  # a route that fails the way a bug would
    def boom():
        raise RuntimeError("password=hunter2 at /srv/secret.py line 12")

    with TestClient(app, raise_server_exceptions=False) as c:
        assert_problem(c.get("/v1/nothing-here"), 404, "not-found")
        assert_problem(c.delete("/v1/jobs", headers=auth), 405, "method-not-allowed")
        r = c.get("/v1/boom")
        p = assert_problem(r, 500, "internal-error")
        assert "hunter2" not in r.text and "secret" not in r.text and "Traceback" not in r.text
        assert p["instance"] == "/v1/boom"


def test_health_ready_metrics(client, auth, sessions):
    assert client.get("/healthz").json() == {"status": "ok"}
    r = client.get("/readyz")
    assert r.status_code == 200 and r.json()["checks"] == {"database": "ok", "broker": "ok"}

    ids = [client.post("/v1/jobs", json=body(), headers=auth).json()["id"] for _ in range(3)]
    with sessions() as s:  # one job through its stages, backdated so the durations are visible
        token = lease.claim_job(s, ids[0], 60)
        for stage in ("load", "calibrate", "score"):
            store.set_progress(s, ids[0], stage, 0.5, lease_token=token)
        states.finish(s, ids[0], token, "succeeded")
        s.execute(update(Job).where(Job.id == ids[1]).values(created_at=utcnow() - timedelta(seconds=600)))
        s.commit()
    text = client.get("/metrics").text
    assert 'nbl_jobs{status="queued"} 2.0' in text and 'nbl_jobs{status="succeeded"} 1.0' in text
    age = float(
        next(line for line in text.splitlines() if line.startswith("nbl_oldest_queued_job_age_seconds ")).split()[1]
    )
    assert 590 < age < 700
    for stage in ("load", "calibrate", "score"):
        assert f'nbl_stage_runs{{stage="{stage}"}} 1.0' in text
        assert f'nbl_stage_duration_mean_seconds{{stage="{stage}"}}' in text


def test_readyz_reports_a_dead_broker(db_url, settings_for):
    from fastapi.testclient import TestClient

    from service.api import create_app

    with TestClient(create_app(settings_for(db_url, broker_url="redis://127.0.0.1:1/0", publish_timeout_s=0.5))) as c:
        r = c.get("/readyz")
        p = assert_problem(r, 503, "not-ready")
        assert p["checks"]["database"] == "ok" and p["checks"]["broker"] != "ok"


def test_openapi_documents_v1(client):
    spec = client.get("/openapi.json").json()
    assert {
        "/v1/jobs",
        "/v1/jobs/{job_id}",
        "/v1/jobs/{job_id}/cancel",
        "/v1/jobs/{job_id}/events",
        "/v1/jobs/{job_id}/layers",
    } <= set(spec["paths"])
    assert client.get("/docs").status_code == 200
