"""Rates per kind of work (issue 38 item 1), through the real task on the embedded SQLite database with a tiny
Llama stored as `local:tiny`: the first job calibrates and records a `fresh` calibration; its statistics are
then in the class's cache, so the next estimate on the same calibration prices calibration as a cache read
(`statistics_cached`), the job that follows records a `cached` calibration, and a fresh calibration is still
priced from the fresh row alone. The fresh-process load check is skipped (tests/worker/publish/test_loadcheck.py)."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from testkit.models import save_tiny_checkpoint

from nbl.recipe import from_request
from nbl.request import JobCreate
from nbl.sizing.stage_plan import plan
from service.api import create_app
from service.core.class_cache import ClassCache
from service.core.stage_rate import StageRate

pytestmark = pytest.mark.usefixtures("one_thread")


def job(num_samples: int = 8) -> dict:
    return {
        "model": {"id": "local:tiny"},
        "calibration": {"dataset": "c4", "num_samples": num_samples, "seq_len": 32},
        "compression": {"mode": "attn", "k": 1},
    }


@pytest.fixture
def api(sqlite_clean_url, settings_for, team_key_for, monkeypatch):
    from fastapi.testclient import TestClient

    from worker import pipeline, tasks

    settings = settings_for(sqlite_clean_url)
    settings.ensure_dirs()
    save_tiny_checkpoint(settings.models_dir / "tiny")
    monkeypatch.setattr(tasks, "settings", settings)
    monkeypatch.setattr(tasks, "_sessions", None)
    monkeypatch.setattr(pipeline, "check", lambda outputs, refs, sink, timeout_s, devices=None: None)
    with TestClient(create_app(settings)) as client:
        yield client, team_key_for(settings, "alpha")


def run(client, auth, body) -> dict:
    from worker import tasks

    r = client.post("/v1/jobs", json=body, headers=auth)
    assert r.status_code == 201, r.text
    tasks.run_job(r.json()["id"])
    done = client.get(f"/v1/jobs/{r.json()['id']}", headers=auth).json()
    assert done["status"] == "succeeded", done
    return done


def kinds(client, job_id: str) -> dict[str, tuple[str, float, float]]:
    """{stage: (kind, token-layers, seconds)} the worker recorded for the job."""
    with client.app.state.sessions() as s:
        rows = s.execute(
            select(StageRate.stage, StageRate.kind, StageRate.weight, StageRate.seconds).where(
                StageRate.job_id == job_id
            )
        ).all()
    return {stage: (kind, w, sec) for stage, kind, w, sec in rows}


@pytest.mark.slow
def test_a_cache_hit_is_priced_and_recorded_as_its_own_kind(api):
    client, auth = api
    first = run(client, auth, job())
    assert first["estimate"]["statistics_cached"] is False
    assert first["result"]["calibration"]["cached"] is False
    fresh = kinds(client, first["id"])
    assert fresh["calibrate"][0] == "fresh/attn" and fresh["compress"][0] == "nbl/attn"
    with client.app.state.sessions() as s:
        assert s.scalar(select(ClassCache.id).where(ClassCache.kind == "statistics")) is not None

    est = client.post("/v1/estimates", json=job(), headers=auth).json()
    assert est["statistics_cached"] is True  # the class's statistics cache holds this calibration
    assert est["stages"]["calibrate"]["kind"] == "cached/attn"
    assert est["stages"]["calibrate"]["measured"] is False  # no cache-hit calibration measured yet

    second = run(client, auth, job())
    assert second["result"]["calibration"]["cached"] is True and second["estimate"]["statistics_cached"] is True
    hit = kinds(client, second["id"])
    assert hit["calibrate"][0] == "cached/attn" and hit["score"][0] == "cached/attn"
    assert hit["calibrate"][1] < fresh["calibrate"][1]  # recorded as the work of a cache read, not a calibration

    again = client.post("/v1/estimates", json=job(), headers=auth).json()
    assert again["stages"]["calibrate"] == {**again["stages"]["calibrate"], "kind": "cached/attn", "measured": True}
    other = client.post("/v1/estimates", json=job(num_samples=16), headers=auth).json()  # not in the cache
    assert other["statistics_cached"] is False and other["stages"]["calibrate"]["kind"] == "fresh/attn"
    w, s = fresh["calibrate"][1:]  # priced from the fresh row alone, at its rate
    work = plan(from_request(JobCreate.model_validate(job(16))), other["shape"]["layers"])["calibrate"].weight
    calibrate = other["stages"]["calibrate"]
    assert calibrate["measured"] is True and calibrate["low"] == calibrate["high"]  # one fresh row: no spread
    assert calibrate["seconds"] == pytest.approx(work * s / w, abs=0.1)
