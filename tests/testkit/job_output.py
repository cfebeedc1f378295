"""A real job output to serve: a tiny Llama stored as `local:tiny` compressed with k=1 and k=2 by
`worker.tasks.run_job` in this process (as tests/worker/publish/test_job_outputs.py does) on Postgres,
published by the real local publisher into NBL_PUBLISH_DIR/alpha/out/k{1,2}, and the API on a live
uvicorn server (raw request paths reach it unchanged: `..` is not normalised away by a client).

A plugin that tests/conftest.py loads: the fixture `job_output` serves the tests of the output files
(tests/service/outputs), of `nbl download` (tests/cli) and of the dashboard's download links (tests/ui)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from testkit.models import save_tiny_checkpoint

JOB = {
    "model": {"id": "local:tiny"},
    "calibration": {"dataset": "c4", "num_samples": 8, "seq_len": 32},
    "compression": {"mode": "attn", "k": [1, 2]},
    "evaluation": {"perplexity": []},
    "publish": {"local_dir": "out"},
}


@dataclass
class Served:
    settings: object
    url: str
    auth: dict  # team alpha's headers
    other: dict  # team beta's headers
    job: dict  # the succeeded job, as the API reads it

    def folder(self, k: int) -> Path:
        return self.settings.publish_dir / "alpha" / "out" / f"k{k}"

    def get(self, path: str, **kw) -> httpx.Response:
        kw["headers"] = {**self.auth, **kw.get("headers", {})}
        return httpx.get(self.url + path, **kw)


@pytest.fixture
def job_output(pg_url, settings_for, team_key_for, live_server, monkeypatch) -> Served:
    from service.api import create_app
    from worker import pipeline, tasks

    settings = settings_for(pg_url)
    settings.ensure_dirs()
    save_tiny_checkpoint(settings.models_dir / "tiny")
    monkeypatch.setattr(tasks, "settings", settings)
    monkeypatch.setattr(tasks, "_sessions", None)
    monkeypatch.setattr(
        pipeline, "check", lambda outputs, refs, sink, timeout_s, devices=None: None
    )  # test_loadcheck.py's
    url = live_server(create_app(settings))
    auth, other = team_key_for(settings, "alpha"), team_key_for(settings, "beta")
    resp = httpx.post(f"{url}/v1/jobs", json=JOB, headers=auth)
    assert resp.status_code == 201, resp.text
    assert tasks.run_job(resp.json()["id"]) == "succeeded"
    job = httpx.get(f"{url}/v1/jobs/{resp.json()['id']}", headers=auth).json()
    assert job["status"] == "succeeded", job
    return Served(settings, url, auth, other, job)


HUB_URL = "https://huggingface.co/acme/x"


def hub_and_old_rows(s: Served) -> str:
    """Another job of team alpha whose k=1 went to the Hub and whose k=2 row is from before per-team
    folders (a server path), written as the worker's store writes them."""
    from service.core.db import make_engine, make_sessionmaker
    from service.jobs import lease, store

    job_id = httpx.post(
        f"{s.url}/v1/jobs",
        json={"model": {"id": "local:tiny"}, "compression": {"k": 1}, "calibration": {"num_samples": 8, "seq_len": 32}},
        headers=s.auth,
    ).json()["id"]
    engine = make_engine(s.settings)
    with make_sessionmaker(engine)() as session:
        token = lease.claim_job(session, job_id, 60)
        assert store.save_artifact(session, job_id, 1, "hub", HUB_URL, "main", "a" * 40, lease_token=token)
        assert store.save_artifact(session, job_id, 2, "local", "file:///srv/published/x/k2", lease_token=token)
    engine.dispose()
    return job_id
