"""Hub failures through a whole job (issue 10, findings 10 and 12), the task run in this process against a
fake Hub, on the embedded SQLite database:

- the Hub answers a commit with 500, then 200: the publish is retried and the job succeeds, one commit;
- a gated Hub model: `user`, "gated or private: set a token with access";
- a Hub model whose config.json says 4 layers, asked for k=7: `user`, found before any weight is
  requested (only config.json was fetched).
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from publish_helpers import JOB
from testkit.fakehub import FakeHub
from testkit.models import save_tiny_checkpoint

from service.api import create_app
from worker.errors import GATED

TOKEN = "hf_write_0123456789"


@pytest.fixture
def env(sqlite_clean_url, settings_for, team_key_for, monkeypatch, tmp_path):
    """(settings, auth, hub): the worker module's settings point at this database and the fake Hub, which
    also serves downloads (huggingface_hub's endpoint, in this process)."""
    from huggingface_hub import constants

    from worker import tasks

    hub = FakeHub(tokens={TOKEN}).start()
    settings = settings_for(sqlite_clean_url, hf_endpoint=hub.url, hub_backoff_s=0.01)
    settings.ensure_dirs()
    save_tiny_checkpoint(settings.models_dir / "tiny")
    monkeypatch.setattr(tasks, "settings", settings)
    monkeypatch.setattr(tasks, "_sessions", None)
    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub.url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    yield settings, team_key_for(settings), hub
    hub.stop()


def run(settings, auth, body: dict) -> dict:
    from worker import tasks

    with TestClient(create_app(settings)) as client:
        r = client.post("/v1/jobs", headers=auth, json=body)
        assert r.status_code == 201, r.text
        tasks.run_job(r.json()["id"])
        return client.get(f"/v1/jobs/{r.json()['id']}", headers=auth).json()


def test_a_hub_500_on_publish_is_retried_and_the_job_succeeds(env):
    settings, auth, hub = env
    hub.fail["commit"] = [500]
    job = run(
        settings,
        auth,
        {**JOB, "evaluation": {"perplexity": []}, "publish": {"repo_id": "alpha/tiny-nbl", "token": TOKEN}},
    )
    assert job["status"] == "succeeded", job["error"]  # was: failed, system, HubUnavailable
    (commit,) = hub.commits_of("alpha/tiny-nbl")
    assert job["artifacts"][0]["commit_sha"] == commit.id
    assert sum(r["path"].endswith("/commit/main") for r in hub.requests) == 2  # the 500, then the retry


def test_a_gated_hub_model_is_a_user_error_that_says_so(env):
    settings, auth, hub = env
    hub.gated["org/gated-llama"] = 401  # what the Hub answers a download without a token
    job = run(settings, auth, {**JOB, "model": {"id": "org/gated-llama"}})
    assert job["status"] == "failed" and job["error"]["type"] == "user", job["error"]
    assert job["error"]["message"].startswith(GATED), job["error"]  # was: "not found on the Hub"


def test_a_hub_model_is_checked_from_its_config_before_any_weight(env):
    settings, auth, hub = env
    config = json.loads((settings.models_dir / "tiny" / "config.json").read_text())
    hub.models["org/tiny-llama"] = {"config.json": json.dumps(config).encode(), "model.safetensors": b"x" * 64}
    job = run(
        settings,
        auth,
        {
            **JOB,
            "model": {"id": "org/tiny-llama"},
            "compression": {"k": 7},
            "calibration": {"dataset": "c4", "num_samples": 10, "seq_len": 4096},
        },
    )
    assert job["status"] == "failed" and job["error"]["type"] == "user", job["error"]
    message = job["error"]["message"]
    assert "compression.k" in message and "number of layers (4)" in message, message
    assert "calibration.seq_len" in message and "context length (256" in message, message
    fetched = {r["path"] for r in hub.requests}
    # the endpoint asked whether it answers at all (hub_access.reach), then config.json: no weight, no file listing
    assert fetched == {"/", "/org/tiny-llama/resolve/main/config.json"}, fetched
