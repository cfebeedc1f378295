"""No server path in any response, event, error message or published file (issue 10, finding 9).

Real jobs through the task, in this process, on the embedded SQLite database: one that succeeds and
publishes locally, and failing ones (the local model's weights removed after submit, the offline data
directory gone, a Hub dataset that cannot be reached). Every API response body, event and error message,
and every published file, is scanned for NBL_HOME, the models directory, the data directory, the
working directory and the temp directory."""

from __future__ import annotations

import json
import os
import tempfile

import pytest
from fastapi.testclient import TestClient
from testkit.models import DATA_DIR, save_tiny_checkpoint

from service.api import create_app

JOB = {
    "model": {"id": "local:tiny"},
    "calibration": {"dataset": "c4", "num_samples": 10, "seq_len": 32},
    "compression": {"k": 1},
    "evaluation": {"perplexity": ["wikitext2"], "max_tokens": 512},
    "publish": {"local_dir": "tiny-out"},
}


@pytest.fixture
def env(sqlite_clean_url, settings_for, team_key_for, monkeypatch):
    from worker import tasks

    settings = settings_for(sqlite_clean_url, hub_attempts=1)
    settings.ensure_dirs()
    for name in ("tiny", "gone"):
        save_tiny_checkpoint(settings.models_dir / name)
    monkeypatch.setattr(tasks, "settings", settings)
    monkeypatch.setattr(tasks, "_sessions", None)
    return settings, team_key_for(settings)


def test_no_server_path_leaves_the_service(env, monkeypatch, tmp_path):
    from huggingface_hub import constants

    from worker import tasks

    settings, auth = env
    bodies: list[str] = []
    with TestClient(create_app(settings)) as client:

        def api(method: str, url: str, **kw):
            r = client.request(method, url, headers=auth, **kw)
            bodies.append(r.text)
            return r

        def job(body: dict, before_run=None) -> str:
            r = api("POST", "/v1/jobs", json=body)
            assert r.status_code == 201, r.text
            if before_run:
                before_run()
            tasks.run_job(r.json()["id"])
            return r.json()["id"]

        ok = job(JOB)
        no_weights = job(
            {**JOB, "model": {"id": "local:gone"}, "publish": {"local_dir": "gone-out"}},
            lambda: (settings.models_dir / "gone" / "model.safetensors").unlink(),
        )
        monkeypatch.setattr(settings, "data_dir", tmp_path / "no-data")  # the worker's NBL_DATA_DIR
        no_data = job(
            {
                **JOB,
                "calibration": {**JOB["calibration"], "seq_len": 16},  # not cached: read the data
                "publish": {"local_dir": "no-data-out"},
            }
        )
        monkeypatch.setattr(settings, "data_dir", DATA_DIR)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # no network here: fail at once, not after retries
        import datasets

        monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
        hub_data = job(
            {
                **JOB,
                "calibration": {"dataset": "owner/calib", "num_samples": 10, "seq_len": 32},
                "publish": {"local_dir": "hub-data-out"},
            }
        )
        api("POST", "/v1/jobs", json={**JOB, "model": {"id": "local:nowhere"}})  # refused at submit
        jobs = {i: api("GET", f"/v1/jobs/{i}").json() for i in (ok, no_weights, no_data, hub_data)}
        for i in jobs:
            api("GET", f"/v1/jobs/{i}/events", params={"limit": 1000})
            api("GET", f"/v1/jobs/{i}/layers")
        api("GET", "/v1/jobs")
        assert api("GET", f"/v1/jobs/{ok}/outputs/1/files").status_code == 200  # the output's files, by the API

    assert jobs[ok]["status"] == "succeeded", jobs[ok]["error"]
    for i in (no_weights, no_data, hub_data):
        assert jobs[i]["status"] == "failed", jobs[i]
    published = [
        (str(f.relative_to(settings.publish_dir)), f.read_bytes().decode("latin-1"))
        for f in settings.publish_dir.rglob("*")
        if f.is_file()
    ]
    assert any(name.endswith("nbl_scores.json") for name, _ in published)
    scores = json.loads(next(text for name, text in published if name.endswith("nbl_scores.json")))
    assert scores["base_model"] == "local:tiny"  # what goes to the Hub: the job's model name

    roots = {
        "NBL_HOME": settings.home,
        "models dir": settings.models_dir,
        "data dir": DATA_DIR,
        "the other data dir": tmp_path,
        "cwd": os.getcwd(),
        "tmp": tempfile.gettempdir() + "/",
    }
    texts = [("response", b) for b in bodies] + [(f"published {name}", text) for name, text in published]
    for where, text in texts:
        for what, root in roots.items():
            for variant in {str(root), os.path.realpath(root)}:
                assert variant not in text, (
                    f"{what} ({variant}) in {where}: ...{text[max(0, text.find(variant) - 200) : text.find(variant) + 200]}..."
                )
    print("\nerror messages:\n" + "\n".join(f"  {jobs[i]['error']}" for i in (no_weights, no_data, hub_data)))
