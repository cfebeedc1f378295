"""No repeated work (issue 28): the base model's evaluation is cached by (model fingerprint, evaluation
spec), so a second job on the same base, another team's, reuses it; the job's result says so
(`result.base_evaluation.cached`), with the seconds it spent. The first job's measured stages make the
second one's estimate (worker/rates.py, service/estimates/rates.py). Through the real
task on the embedded SQLite database with a tiny Llama stored as `local:tiny` (tests/worker/eval/test_eval_jobs.py);
the fresh-process load check is skipped (tests/worker/publish/test_loadcheck.py covers it)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from testkit.models import save_tiny_checkpoint

from nbl.sizing.rates import measured_range
from service.api import create_app

pytestmark = pytest.mark.usefixtures("one_thread")


def job(k: int, max_tokens: int = 512) -> dict:
    return {
        "model": {"id": "local:tiny"},
        "calibration": {"dataset": "c4", "num_samples": 8, "seq_len": 32},
        "compression": {"mode": "attn", "k": k},
        "evaluation": {"perplexity": ["wikitext2"], "max_tokens": max_tokens},
    }


@pytest.fixture
def api(sqlite_clean_url, settings_for, team_key_for, monkeypatch):
    from worker import pipeline, tasks

    settings = settings_for(sqlite_clean_url, class_prices="cpu=0.5,gpu-24g=2")
    settings.ensure_dirs()
    save_tiny_checkpoint(settings.models_dir / "tiny")
    monkeypatch.setattr(tasks, "settings", settings)
    monkeypatch.setattr(tasks, "_sessions", None)
    monkeypatch.setattr(pipeline, "check", lambda outputs, refs, sink, timeout_s, devices=None: None)
    with TestClient(create_app(settings)) as client:
        yield client, team_key_for(settings, "alpha"), team_key_for(settings, "beta")


def run(client, auth, body) -> dict:
    from worker import tasks

    r = client.post("/v1/jobs", json=body, headers=auth)
    assert r.status_code == 201, r.text
    tasks.run_job(r.json()["id"])
    done = client.get(f"/v1/jobs/{r.json()['id']}", headers=auth).json()
    assert done["status"] == "succeeded", done
    return done


def stage_rows(client) -> dict[str, dict[str, tuple[float, float]]]:
    """{job id: {stage: (token-layers, seconds)}} the worker recorded (worker/rates.py)."""
    from sqlalchemy import select

    from service.core.stage_rate import StageRate

    with client.app.state.sessions() as s:
        rows = s.execute(select(StageRate.job_id, StageRate.stage, StageRate.weight, StageRate.seconds)).all()
    out: dict = {}
    for job_id, stage, weight, seconds in rows:
        out.setdefault(job_id, {})[stage] = (weight, seconds)
    return out


def rows_of(client, job_id: str) -> dict[str, tuple[float, float]]:
    return stage_rows(client).get(job_id, {})


def first_eta(client, auth, job_id):
    events = client.get(f"/v1/jobs/{job_id}/events", headers=auth).json()["data"]
    return next(e for e in events if e["kind"] == "stage")["eta_seconds"]


@pytest.mark.slow
def test_a_second_job_on_the_same_base_reuses_its_evaluation_across_teams(api):
    client, alpha, beta = api
    first = run(client, alpha, job(k=1))
    assert first["result"]["base_evaluation"]["cached"] is False
    assert first["estimate"]["basis"] == "model" and first["estimate"]["stages"] is None  # no job measured yet
    assert first["result"]["base_evaluation"]["seconds"] > 0
    second = run(client, beta, job(k=2))  # another team, another k: the same base and evaluation
    assert second["result"]["base_evaluation"]["cached"] is True
    est = second["estimate"]  # the first job's measured stages, on the same class and shape (issue 28 item 5)
    assert est["basis"] == "measured" and {"calibrate", "evaluate"} <= set(est["stages"])
    if all(s["measured"] for s in est["stages"].values()):  # the first job of a kind keeps its margin
        assert est["seconds"][1] <= 2 * est["seconds"][0]
    assert est["seconds"] == list(measured_range(est["stages"]))  # the spread of the measurements
    assert est["gpu_hours"] == [0, 0] and est["cost"] == [round(h * 0.5, 4) for h in est["worker_hours"]]
    assert first_eta(client, alpha, first["id"]) is None  # nothing measured before its first stage ran
    assert first_eta(client, beta, second["id"]) > 0  # its class's stage times, from the first event
    assert second["result"]["base"] == first["result"]["base"]  # the figures, not a second measurement
    assert first["estimate"]["base_evaluation_cached"] is False and est["base_evaluation_cached"] is True
    assert est["stages"]["evaluate"]["base_cached"] is True and est["stages"]["load"]["warm"] is True
    assert (
        first["estimate"]["warm_load"] is False
    )  # its load hashed the model's files (a `fetch`): the second's did not
    assert "fetch" in rows_of(client, first["id"]) and "fetch" not in rows_of(client, second["id"])
    assert "fetch" not in est["stages"]  # the class loaded this model: nothing to fetch
    # the second job's evaluation is priced and recorded as its output's alone, at the first job's rate per model
    rows = stage_rows(client)
    (w1, s1), (w2, _) = rows[first["id"]]["evaluate"], rows[second["id"]]["evaluate"]
    assert w2 == pytest.approx(w1 / 2)  # base + one output, then one output
    assert est["stages"]["evaluate"]["seconds"] == round(w2 / (w1 / s1), 1)
    other = run(client, alpha, job(k=1, max_tokens=256))  # another evaluation spec: measured again
    assert other["result"]["base_evaluation"]["cached"] is False
    assert other["result"]["base"] != first["result"]["base"]
