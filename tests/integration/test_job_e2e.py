"""A job end to end through the real parts: the API commits and enqueues, a real `celery worker`
process (worker.tasks) consumes from a real broker, claims the row, runs the engine on a tiny
Llama stored as `local:tiny`, publishes to NBL_PUBLISH_DIR (with the model card and its plot), and the
API reports the result.

Two deployments: the embedded default (SQLite + kombu's SQLAlchemy transport, no server) and the
docker-compose one (Postgres + Redis)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from testkit.models import DATA_DIR, save_tiny_checkpoint

from service.api import create_app
from service.core.celery_app import default_queue

REPO = Path(__file__).resolve().parents[2]

JOB = {
    "model": {"id": "local:tiny"},
    "calibration": {"dataset": "c4", "num_samples": 10, "seq_len": 32},
    "compression": {"mode": "attn", "criterion": "cca", "k": [1, 2]},
    "evaluation": {"perplexity": ["wikitext2"], "max_tokens": 2048},
    "publish": {"local_dir": "tiny-nbl"},
}


def _start_worker(settings, log_path: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "NBL_HOME": str(settings.home),
        "DATABASE_URL": settings.database_url,
        "BROKER_URL": settings.broker_url,
        "NBL_QUEUE": settings.queue_name,
        "NBL_DATA_DIR": str(DATA_DIR),
        "PYTHONPATH": str(REPO),
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "worker.tasks",
            "worker",
            "--pool",
            "solo",
            "--loglevel",
            "INFO",
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
            "-Q",
            default_queue(settings),
        ],
        cwd=REPO,
        env=env,
        stdout=open(log_path, "w"),
        stderr=subprocess.STDOUT,
    )


def _wait(c, auth, ids, worker, log_path, timeout=600):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = [c.get(f"/v1/jobs/{i}", headers=auth).json() for i in ids]
        if all(j["status"] in ("succeeded", "failed", "cancelled") for j in jobs):
            return jobs
        assert worker.poll() is None, log_path.read_text()
        time.sleep(0.5)
    raise AssertionError(f"jobs not done: {[j['status'] for j in jobs]}\n{log_path.read_text()[-4000:]}")


@pytest.mark.parametrize("deployment", ["embedded", "postgres+redis"])
def test_tiny_model_job_runs_end_to_end(deployment, request, settings_for, team_key_for, tmp_path):
    if deployment == "embedded":
        settings = settings_for(request.getfixturevalue("sqlite_clean_url"))
    else:
        redis_url, queue, _ = request.getfixturevalue("redis_queue")
        settings = settings_for(request.getfixturevalue("pg_url"), broker_url=redis_url, queue_name=queue)
    settings.ensure_dirs()
    save_tiny_checkpoint(settings.models_dir / "tiny")
    auth = team_key_for(settings)
    log_path = tmp_path / "worker.log"
    with TestClient(create_app(settings)) as c:
        resp = c.post("/v1/jobs", json=JOB, headers=auth)
        assert resp.status_code == 201, resp.text
        job_id = resp.json()["id"]
        bad = c.post("/v1/jobs", json={**JOB, "compression": {"k": 7}}, headers=auth)  # k >= 4 layers: refused at once
        assert bad.status_code == 422 and "number of layers (4)" in bad.text, bad.text
        hub = c.post("/v1/jobs", json={**JOB, "publish": {"repo_id": "team/tiny-nbl"}}, headers=auth).json()["id"]
        worker = _start_worker(settings, log_path)
        try:
            job, hub_job = _wait(c, auth, [job_id, hub], worker, log_path)
        finally:
            worker.terminate()
            worker.wait(timeout=30)

        assert job["status"] == "succeeded", (job, log_path.read_text()[-4000:])
        assert job["progress"] == 1 and job["attempt"] == 1 and job["error"] is None
        stages = [
            e["stage"] for e in c.get(f"/v1/jobs/{job_id}/events", headers=auth).json()["data"] if e["kind"] == "stage"
        ]
        assert stages == ["load", "calibrate", "score", "compress", "check", "evaluate", "publish"]
        metrics = job["metrics"]
        assert set(metrics) >= {"base", "k1", "k2", "calibration"}
        for variant in ("base", "k1", "k2"):
            assert metrics[variant]["perplexity/wikitext2/tokens"] > 1000
            assert metrics[variant]["perplexity/wikitext2/ppl"] > 1
        # the outputs were evaluated as saved: different models, different numbers
        assert metrics["k1"]["perplexity/wikitext2/ppl"] != metrics["base"]["perplexity/wikitext2/ppl"]
        layers = c.get(f"/v1/jobs/{job_id}/layers", headers=auth).json()["data"]
        assert sorted({row["layer"] for row in layers}) == [0, 1, 2, 3]
        selected = {s["k"]: s["layers"] for s in job["selected_layers"]}
        assert {k: len(v) for k, v in selected.items()} == {1: 1, 2: 2}
        for k in (1, 2):
            out = settings.publish_dir / "alpha" / "tiny-nbl" / f"k{k}"  # by team
            cfg = json.loads((out / "config.json").read_text())
            assert cfg["nbl"]["layers"] == selected[k] and (out / "model.safetensors").is_file()
            assert (out / "nbl_scores.png").is_file() and "## Evaluation: base vs compressed" in (
                out / "README.md"
            ).read_text()
        assert {a["uri"] for a in job["artifacts"]} == {
            f"/v1/jobs/{job_id}/outputs/{k}/files" for k in (1, 2)
        }  # API URLs
        assert not (settings.home / "jobs" / job_id).exists()  # the scratch directory went with the job

        # a Hub target without a token (neither the job's nor the team's): fails clearly, publishes nowhere
        # (pushing to a Hub: tests/worker/publish/test_publish_job.py)
        assert hub_job["status"] == "failed" and hub_job["error"]["type"] == "user"
        assert "needs a Hub write token" in hub_job["error"]["message"]
        assert not (settings.publish_dir / "alpha" / hub).exists()
