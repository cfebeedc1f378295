"""A job whose Hub model's index reaches outside its snapshot (issue 35, finding 1), through the real task in
this process on the embedded SQLite database, the model a snapshot in an offline Hugging Face cache.

Was: the job calibrated, compressed and checked another team's published weights and failed only at
evaluate (without an evaluation it succeeded, and its output held 61 of their 66 tensors). Now it fails at
load as a `user` error, and nothing it answers names a path of the server."""

from __future__ import annotations

import os
import tempfile

from fastapi.testclient import TestClient
from testkit.crafted_snapshot import craft, hub_snapshot, secret_model, sharded_checkpoint

from service.api import create_app

JOB = {
    "model": {"id": "org/evil"},
    "calibration": {"dataset": "c4", "num_samples": 10, "seq_len": 32},
    "compression": {"k": 1},
    "evaluation": {"perplexity": ["wikitext2"], "max_tokens": 512},
    "publish": {"local_dir": "evil-out"},
}


def test_a_job_whose_index_reaches_outside_its_snapshot_fails_at_load_as_a_user_error(
    sqlite_clean_url, settings_for, team_key_for, monkeypatch, tmp_path
):
    from huggingface_hub import constants

    from worker import tasks

    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    snap = hub_snapshot(cache, "org/evil", sharded_checkpoint(tmp_path / "alpha"))
    name = craft(snap, "dotdot", secret_model(tmp_path))  # ../../../../home/published/beta/secret/model.safetensors
    settings = settings_for(sqlite_clean_url, hf_hub_offline=True, hub_attempts=1)
    settings.ensure_dirs()
    monkeypatch.setattr(tasks, "settings", settings)
    monkeypatch.setattr(tasks, "_sessions", None)
    auth = team_key_for(settings)

    with TestClient(create_app(settings)) as client:
        r = client.post("/v1/jobs", headers=auth, json=JOB)
        assert r.status_code == 201, r.text
        tasks.run_job(r.json()["id"])
        job = client.get(f"/v1/jobs/{r.json()['id']}", headers=auth)
        events = client.get(f"/v1/jobs/{r.json()['id']}/events?limit=500", headers=auth)

    error = job.json()["error"]
    assert job.json()["status"] == "failed" and error["type"] == "user", job.json()
    assert job.json()["stage"] == "load", job.json()  # before calibrate read a byte of any weight
    said = f"WeightFileError: org/evil: the weights name {name!r}, which is not a file of the model"
    assert error["message"].startswith(said), error
    assert not (settings.publish_dir / "alpha" / "evil-out").exists()
    roots = {
        "NBL_HOME": settings.home,
        "the Hub cache": cache,
        "the test's folder": tmp_path,
        "cwd": os.getcwd(),
        "tmp": tempfile.gettempdir() + "/",
    }
    for where, text in (("job", job.text), ("events", events.text)):
        for what, root in roots.items():
            for variant in {str(root), os.path.realpath(root)}:
                assert variant not in text, f"{what} ({variant}) in the {where}: {text}"
