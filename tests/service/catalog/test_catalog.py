"""GET /v1/models and GET /v1/usage (issue 28): what a team can run, with shapes and sizes, and what it
used by month, on SQLite and Postgres; cursor pages and problem+json as the other routes."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from sqlalchemy import update
from testkit.service_lib import TINY_CONFIG, assert_problem, body

from service.core.models import Job
from service.jobs import lease, states


def _local(settings, name: str) -> None:
    d = settings.models_dir / name
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({**TINY_CONFIG, "architectures": ["LlamaForCausalLM"]}))
    (d / "model.safetensors").write_bytes(b"\0" * 1000)


def test_models_lists_local_models_then_the_teams_hub_ids(client, auth, team_key, settings, sessions):
    _local(settings, "tiny")
    _local(settings, "other")
    client.post("/v1/jobs", json=body(model="acme/old"), headers=auth)
    client.post("/v1/jobs", json=body(k=1, model="local:tiny", calibration={"seq_len": 64}), headers=auth)
    for _ in range(2):
        newest = client.post("/v1/jobs", json=body(model="acme/new"), headers=auth).json()["id"]
    with sessions() as s:  # as a job whose config the API read at submit: its estimate keeps the shape
        s.execute(update(Job).where(Job.id == newest).values(estimate={"shape": {"layers": 30, "params": 134}}))
        s.commit()
    got = client.get("/v1/models", headers=auth).json()
    assert [m["id"] for m in got["data"]] == ["local:other", "local:tiny", "acme/new", "acme/old"]
    tiny = got["data"][1]
    assert tiny["source"] == "local" and tiny["size_bytes"] > 1000
    assert tiny["shape"]["layers"] == TINY_CONFIG["num_hidden_layers"] and tiny["shape"]["params"] > 0
    assert tiny["shape"]["architecture"] == "LlamaForCausalLM"
    other = got["data"][0]  # a local model carries the team's use of it, as a Hub id does (issue 38)
    assert (tiny["jobs"], other["jobs"], other["last_used_at"]) == (1, 0, None) and tiny["last_used_at"]
    new, old = got["data"][2:]
    assert (new["source"], new["jobs"], new["shape"]) == ("hub", 2, {"layers": 30, "params": 134})
    assert old["shape"] is None and old["size_bytes"] is None and old["last_used_at"]
    stored = client.get(
        f"/v1/jobs/{client.get('/v1/jobs?limit=1', headers=auth).json()['data'][0]['id']}", headers=auth
    )
    assert stored.status_code == 200

    first = client.get("/v1/models?limit=3", headers=auth).json()
    assert first["has_more"] and len(first["data"]) == 3
    rest = client.get("/v1/models", params={"limit": 3, "after": first["next_cursor"]}, headers=auth).json()
    assert [m["id"] for m in rest["data"]] == ["acme/old"] and rest["has_more"] is False and rest["next_cursor"] is None
    assert_problem(client.get("/v1/models?after=nope", headers=auth), 422, "validation-error")
    assert_problem(client.get("/v1/models?limit=0", headers=auth), 422, "validation-error")
    assert_problem(client.get("/v1/models"), 401, "unauthorized")
    beta = client.get("/v1/models", headers=team_key("beta")).json()  # the server's models, not alpha's Hub ids
    assert [m["id"] for m in beta["data"]] == ["local:other", "local:tiny"]
    assert [m["jobs"] for m in beta["data"]] == [0, 0]  # alpha's use is not beta's


def test_team_use_counts_every_model_and_keeps_the_newest_use():
    from service.catalog.models import team_use

    t = [datetime(2026, 12, d, tzinfo=timezone.utc) for d in (1, 2, 3)]
    rows = [  # newest first, as the query orders them
        ({"model": {"id": "local:tiny"}}, None, t[2]),
        ({"model": {"id": "acme/m"}}, {"shape": {"layers": 2}}, t[1]),
        ({"model": {"id": "local:tiny"}}, None, t[0]),
        ({}, None, t[0]),
    ]
    used = team_use(rows)
    assert list(used) == ["local:tiny", "acme/m"]
    assert used["local:tiny"] == {"jobs": 2, "last_used_at": t[2], "shape": None}
    assert used["acme/m"] == {"jobs": 1, "last_used_at": t[1], "shape": {"layers": 2}}


def test_a_local_job_stores_the_shape_it_was_estimated_from(client, auth, settings):
    _local(settings, "tiny")
    job = client.post("/v1/jobs", json=body(k=1, model="local:tiny", calibration={"seq_len": 64}), headers=auth).json()
    assert job["estimate"]["shape"]["hidden_size"] == TINY_CONFIG["hidden_size"]


def test_usage_by_month_with_worker_and_gpu_hours(client, auth, team_key, settings, sessions):
    ids = [client.post("/v1/jobs", json=body(), headers=auth).json()["id"] for _ in range(3)]
    with sessions() as s:
        token = lease.claim_job(s, ids[0], 60)
        states.finish(s, ids[0], token, "succeeded")
        nov, dec = datetime(2026, 11, 5, tzinfo=timezone.utc), datetime(2026, 12, 2, tzinfo=timezone.utc)
        gpu = f"{settings.queue_name}-gpu-24g"  # 1 GPU in the default NBL_WORKER_CLASSES
        s.execute(
            update(Job)
            .where(Job.id == ids[0])
            .values(
                created_at=nov, started_at=nov, finished_at=nov + timedelta(hours=2), estimate={"worker_class": gpu}
            )
        )
        s.execute(update(Job).where(Job.id == ids[1]).values(created_at=dec))
        s.execute(
            update(Job)
            .where(Job.id == ids[2])
            .values(
                created_at=dec,
                started_at=dec,
                finished_at=dec + timedelta(minutes=30),
                status="failed",
                error_type="system",
                estimate={"worker_class": f"{settings.queue_name}-cpu"},
            )
        )
        s.commit()
    got = client.get("/v1/usage", headers=auth).json()
    assert got["object"] == "usage" and got["team"] == "alpha" and got["disk"]["outputs_bytes"] == 0
    assert [m["month"] for m in got["data"]] == ["2026-12", "2026-11"]
    d, n = got["data"]
    assert d["jobs"] == {"queued": 1, "failed": 1, "total": 2}
    assert d["worker_hours"] == {f"{settings.queue_name}-cpu": 0.5} and d["gpu_hours"] == 0
    assert n["jobs"] == {"succeeded": 1, "total": 1}
    assert n["worker_hours"] == {gpu: 2.0} and n["gpu_hours"] == 2.0
    page = client.get("/v1/usage?limit=1", headers=auth).json()
    assert [m["month"] for m in page["data"]] == ["2026-12"] and page["has_more"]
    older = client.get("/v1/usage", params={"limit": 1, "after": page["next_cursor"]}, headers=auth).json()
    assert [m["month"] for m in older["data"]] == ["2026-11"] and not older["has_more"]
    assert client.get("/v1/usage", headers=team_key("beta")).json()["data"] == []
    assert_problem(client.get("/v1/usage?after=x", headers=auth), 422, "validation-error")
    assert_problem(client.get("/v1/usage", headers={"Authorization": "Bearer nbl_bad"}), 401, "unauthorized")
