"""An input model on a Hub that is away or says no (issue 24, finding 20), through the real task in this
process on the embedded SQLite database (as test_hub_failures_job.py), the Hub a closed loopback port or
the fake Hub:

- no Hub at the endpoint: the load stage says which Hub it contacts for which model and revision, warns
  at each retry, and fails `system` in seconds with a message naming the endpoint and the way out. Was:
  "load 0 %" and no event for two minutes (huggingface_hub's own five retries inside each of ours), then
  LocalEntryNotFoundError's text;
- the Hub answers 404 (no such model) or 401/403 (gated): `user`, worded for the job, naming the model.
"""

from __future__ import annotations

import socket
import time

import pytest
from fastapi.testclient import TestClient
from publish_helpers import JOB
from testkit.fakehub import FakeHub

from service.api import create_app
from worker.errors import GATED


@pytest.fixture
def at(sqlite_clean_url, settings_for, team_key_for, monkeypatch, tmp_path):
    """at(url, **settings) -> (settings, auth): the worker's model downloads and the API's config fetch go
    to `url`, with an empty download cache."""
    from huggingface_hub import constants

    from worker import tasks

    def point(url: str, **overrides):
        monkeypatch.setenv("HF_ENDPOINT", url)  # the API's estimate (service/estimates/configs.py)
        monkeypatch.setattr(constants, "ENDPOINT", url)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
        settings = settings_for(sqlite_clean_url, **overrides)
        settings.ensure_dirs()
        monkeypatch.setattr(tasks, "settings", settings)
        monkeypatch.setattr(tasks, "_sessions", None)
        return settings, team_key_for(settings)

    return point


def run(settings, auth, model: str) -> tuple[dict, list[dict]]:
    """The job of `model`, run to its end: (the job, its events)."""
    from worker import tasks

    with TestClient(create_app(settings)) as client:
        r = client.post("/v1/jobs", headers=auth, json={**JOB, "model": {"id": model}})
        assert r.status_code == 201, r.text
        tasks.run_job(r.json()["id"])
        job = client.get(f"/v1/jobs/{r.json()['id']}", headers=auth).json()
        events = client.get(f"/v1/jobs/{job['id']}/events?limit=500", headers=auth).json()["data"]
        return job, events


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_hub_is_said_retried_and_fails_fast_as_system(at):
    url = f"http://127.0.0.1:{closed_port()}"  # nothing listens there
    settings, auth = at(url, hub_attempts=2, hub_backoff_s=1.0)
    start = time.monotonic()
    job, events = run(settings, auth, "org/tiny-llama")
    took = time.monotonic() - start
    error = job["error"]
    assert job["status"] == "failed" and error["type"] == "system", error
    message = error["message"]
    assert message.startswith(f"cannot reach the Hugging Face Hub at {url} to download org/tiny-llama@main ("), message
    assert "set HF_HUB_OFFLINE=1" in message and "local:NAME" in message, message
    assert "LocalEntryNotFoundError" not in message and "Traceback" not in message, message
    said = [e["message"] or "" for e in events]
    first = next(m for m in said if "contacting" in m)
    assert first == f"loading org/tiny-llama: contacting the Hugging Face Hub at {url} for org/tiny-llama@main"
    retry = [e for e in events if e["kind"] == "warning" and "trying again in 1 s (attempt 2 of 2)" in e["message"]]
    assert len(retry) == 1 and "cannot reach the Hugging Face Hub" in retry[0]["message"], said
    assert said.index(first) < said.index(retry[0]["message"])
    # Was 2 x ~23 s (huggingface_hub retries a refused connection 5 times, 1+2+4+8+8 s apart) + 1 s.
    assert took < 20, took


@pytest.fixture
def hub():
    h = FakeHub().start()
    yield h
    h.stop()


def test_a_model_missing_from_the_hub_is_a_user_error_that_names_it(at, hub):
    settings, auth = at(hub.url)
    job, _ = run(settings, auth, "org/missing")
    error = job["error"]
    assert job["status"] == "failed" and error["type"] == "user", error
    assert error["message"] == f"org/missing: no such model on the Hugging Face Hub at {hub.url}", error


@pytest.mark.parametrize("status", [401, 403])
def test_a_gated_model_is_a_user_error_that_names_the_hub_and_the_model(at, hub, status):
    hub.gated["org/gated-llama"] = status
    settings, auth = at(hub.url)
    job, _ = run(settings, auth, "org/gated-llama")
    error = job["error"]
    assert job["status"] == "failed" and error["type"] == "user", error
    assert error["message"].startswith(
        f"{GATED} (org/gated-llama): the Hugging Face Hub at {hub.url} answered {status} for org/gated-llama@main"
    ), error
