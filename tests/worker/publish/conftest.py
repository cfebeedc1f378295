"""Fixtures of the publishing tests (publish_helpers.py holds their plain helpers)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from publish_helpers import TOKEN
from testkit.models import save_tiny_checkpoint

from service.api import create_app
from service.core.paths import scratch_dir


@pytest.fixture
def fake_hub():
    """A running fake Hub that accepts TOKEN."""
    from testkit.fakehub import FakeHub

    hub = FakeHub(tokens={TOKEN}).start()
    yield hub
    hub.stop()


@pytest.fixture
def deployment(request, settings_for, team_key_for):
    """(Settings on Postgres and Redis with a tiny Llama as `local:tiny`, team alpha's API key): a deployment for a
    real `celery worker` process (publish_helpers.start_worker). test_publish_job.py has its own."""
    redis_url, queue, _ = request.getfixturevalue("redis_queue")
    settings = settings_for(request.getfixturevalue("pg_url"), broker_url=redis_url, queue_name=queue)
    settings.ensure_dirs()
    save_tiny_checkpoint(settings.models_dir / "tiny")
    return settings, team_key_for(settings)


@pytest.fixture
def here(sqlite_clean_url, settings_for, team_key_for, monkeypatch):
    """(settings, API client, {team: auth}, scratch seen at publish, hooks at publish): the worker's task
    runs in this process with these settings."""
    from worker import pipeline, tasks

    def make(**overrides):
        settings = settings_for(sqlite_clean_url, **overrides)
        settings.ensure_dirs()
        save_tiny_checkpoint(settings.models_dir / "tiny")
        monkeypatch.setattr(tasks, "settings", settings)
        monkeypatch.setattr(tasks, "_sessions", None)  # built from the settings above on first use
        monkeypatch.setattr(pipeline, "check", lambda outputs, refs, sink, timeout_s, devices=None: None)
        seen, hooks = {}, {}
        progress = tasks.DbSink.progress

        def spy(self, stage, fraction, message):
            if stage == "publish" and fraction == 0.0 and self.job_id not in seen:
                seen[self.job_id] = sorted(p.name for p in scratch_dir(settings, self.job_id).rglob("*.safetensors"))
                hooks.get(self.job_id, lambda: None)()
            progress(self, stage, fraction, message)

        monkeypatch.setattr(tasks.DbSink, "progress", spy)
        client = TestClient(create_app(settings)).__enter__()
        made.append(client)
        auth = {team: team_key_for(settings, team) for team in ("alpha", "beta")}
        return settings, client, auth, seen, hooks

    made: list[TestClient] = []
    yield make
    for client in made:
        client.__exit__(None, None, None)
