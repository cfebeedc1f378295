"""A team's disk quota at submit (issue 24 §15): NBL_TEAM_DISK_QUOTA_BYTES against the bytes of the team's local
outputs on disk, what its active jobs plan and what this job's estimate plans; over it is a 422 naming the numbers.
The estimate is the API's own (an 8B config.json under NBL_MODELS_DIR, no weights)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from sqlalchemy import func, select
from testkit.service_lib import assert_problem

from nbl.request import JobCreate
from service.core.models import Job
from service.core.settings import Settings
from service.estimates.placement import placement_for

LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}
JOB = {
    "model": {"id": "local:eight"},
    "calibration": {"num_samples": 8, "seq_len": 32},
    "compression": {"k": 1},
    "evaluation": {"perplexity": []},
}


def write_config(directory: Path, config: dict) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))


def outputs_bytes(settings, job: dict) -> int:
    """What the estimate plans for the job's outputs (service.estimates, as the API computes it)."""
    return placement_for(JobCreate.model_validate(job), settings, required=True)[1]["disk"]["outputs"]


@pytest.fixture
def deploy(db_url, settings_for, team_key_for):
    """deploy(quota in outputs of JOB, or None) -> (settings, TestClient, headers of team alpha, one output's bytes)."""
    from fastapi.testclient import TestClient

    from service.api import create_app

    opened = []

    def make(outputs: float | None):
        probe = settings_for(db_url)
        write_config(probe.models_dir / "eight", LLAMA_8B)
        one = outputs_bytes(probe, JOB)
        settings = settings_for(db_url, team_disk_quota_bytes=None if outputs is None else int(outputs * one))
        write_config(settings.models_dir / "eight", LLAMA_8B)
        client = TestClient(create_app(settings))
        client.__enter__()
        opened.append(client)
        return settings, client, team_key_for(settings, "alpha"), one

    yield make
    for client in opened:
        client.__exit__(None, None, None)


def jobs(settings) -> int:
    from service.core.db import make_engine

    engine = make_engine(settings)
    with engine.connect() as conn:
        n = conn.execute(select(func.count()).select_from(Job)).scalar()
    engine.dispose()
    return n


def test_a_job_planning_more_than_the_quota_is_a_422_naming_the_numbers(deploy):
    settings, client, auth, one = deploy(1.5)
    p = assert_problem(
        client.post("/v1/jobs", json={**JOB, "compression": {"k": [1, 2]}}, headers=auth), 422, "validation-error"
    )
    quota = int(1.5 * one)
    assert p["errors"][0]["type"] == "disk_quota_exceeded" and p["errors"][0]["loc"] == ["body", "publish"]
    assert {k: p["errors"][0][k] for k in ("quota_bytes", "planned_bytes", "used_bytes", "reserved_bytes")} == {
        "quota_bytes": quota,
        "planned_bytes": 2 * one,
        "used_bytes": 0,
        "reserved_bytes": 0,
    }
    assert p["detail"].startswith(f"this job's estimated {2 * one} bytes (")
    assert f"over its disk quota of {quota} bytes" in p["detail"] and "NBL_TEAM_DISK_QUOTA_BYTES" in p["detail"]
    assert "its outputs use 0 bytes" in p["detail"] and jobs(settings) == 0
    assert client.post("/v1/jobs", json=JOB, headers=auth).status_code == 201  # one output fits


def test_the_teams_active_jobs_count_with_what_they_plan_and_the_hub_does_not(deploy):
    settings, client, auth, one = deploy(1.5)
    first = client.post("/v1/jobs", json=JOB, headers=auth).json()["id"]
    p = assert_problem(client.post("/v1/jobs", json=JOB, headers=auth), 422, "validation-error")
    assert p["errors"][0]["reserved_bytes"] == one and f"its active jobs plan {one} bytes more" in p["detail"]
    hub = {**JOB, "publish": {"repo_id": "acme/out"}}  # the Hub's storage is not the server's disk
    assert client.post("/v1/jobs", json=hub, headers=auth).status_code == 201
    assert client.post(f"/v1/jobs/{first}/cancel", headers=auth).json()["status"] == "cancelled"
    assert client.post("/v1/jobs", json=JOB, headers=auth).status_code == 201  # its reservation went with it


def test_the_outputs_on_disk_count_per_team_and_an_overwrite_frees_what_it_replaces(deploy, team_key_for):
    settings, client, auth, one = deploy(1.5)
    old = settings.publish_dir / "alpha" / "old"
    old.mkdir(parents=True)
    with open(old / "model.safetensors", "wb") as f:  # sparse: st_size counts, the disk holds nothing
        f.truncate(one)
    p = assert_problem(client.post("/v1/jobs", json=JOB, headers=auth), 422, "validation-error")
    assert p["errors"][0]["used_bytes"] == one and f"its outputs use {one} bytes" in p["detail"]
    assert client.post("/v1/jobs", json=JOB, headers=team_key_for(settings, "beta")).status_code == 201
    replace = {**JOB, "publish": {"local_dir": "old", "overwrite": True}}
    assert client.post("/v1/jobs", json=replace, headers=auth).status_code == 201
    os.unlink(old / "model.safetensors")


def test_no_quota_checks_nothing(deploy):
    settings, client, auth, one = deploy(None)
    assert client.post("/v1/jobs", json={**JOB, "compression": {"k": [1, 2, 3]}}, headers=auth).status_code == 201


def test_the_setting_defaults_to_one_terabyte_and_empty_means_no_limit(monkeypatch, tmp_path):
    assert Settings(home=tmp_path).team_disk_quota_bytes == 10**12
    monkeypatch.setenv("NBL_TEAM_DISK_QUOTA_BYTES", "")
    assert Settings(home=tmp_path).team_disk_quota_bytes is None
    monkeypatch.setenv("NBL_TEAM_DISK_QUOTA_BYTES", "5000000000")
    assert Settings(home=tmp_path).team_disk_quota_bytes == 5 * 10**9
    monkeypatch.setenv("NBL_TEAM_DISK_QUOTA_BYTES", "0")
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        Settings(home=tmp_path)


def test_concurrent_submits_count_one_after_the_other(pg_url, settings_for, live_server, team_key_for):
    """10 racing POSTs (no key) where the quota holds one job: the team's lock makes each see the others' plans."""
    import threading

    import httpx

    from service.api import create_app

    probe = settings_for(pg_url)
    write_config(probe.models_dir / "eight", LLAMA_8B)
    settings = settings_for(pg_url, team_disk_quota_bytes=int(1.5 * outputs_bytes(probe, JOB)))
    write_config(settings.models_dir / "eight", LLAMA_8B)
    base, headers = live_server(create_app(settings)), team_key_for(settings, "racers")
    barrier, codes = threading.Barrier(10), []

    def post():
        with httpx.Client(base_url=base, timeout=60) as c:
            barrier.wait()
            codes.append(c.post("/v1/jobs", json=JOB, headers=headers).status_code)

    threads = [threading.Thread(target=post) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [201] + [422] * 9 and jobs(settings) == 1
