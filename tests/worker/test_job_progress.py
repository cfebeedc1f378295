"""Progress, ETA and cancellation through the real task: the API stores the job, `worker.tasks.run_job`
runs in this process on the embedded SQLite database and a tiny Llama stored as `local:tiny` (as
tests/worker/publish/test_job_outputs.py does). The sink is slowed down (a sleep before each report) so that a
tiny model's stages last long enough to be measured, and to see a cancel inside the stage asked for.
"""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient
from testkit.models import DATA_DIR, save_tiny_checkpoint

from service.api import create_app

JOB = {
    "model": {"id": "local:tiny"},
    "calibration": {"dataset": "c4", "num_samples": 10, "seq_len": 32},
    "compression": {"mode": "attn", "k": 1},
    "evaluation": {"perplexity": ["wikitext2"], "max_tokens": 1024},
}


@pytest.fixture
def here(sqlite_clean_url, settings_for, team_key_for, monkeypatch):
    """(API client, auth, calls): the task runs in this process; `calls` lists every (stage, fraction)
    the pipeline reported; `on_report[stage](job_id, fraction)` runs before the sink sees a report."""
    from worker import pipeline, tasks

    settings = settings_for(sqlite_clean_url)
    settings.ensure_dirs()
    save_tiny_checkpoint(settings.models_dir / "tiny")
    monkeypatch.setattr(tasks, "settings", settings)
    monkeypatch.setattr(tasks, "_sessions", None)
    monkeypatch.setattr(
        pipeline, "check", lambda outputs, refs, sink, timeout_s, devices=None: None
    )  # 5 s a fresh process
    calls: list[tuple[str, float]] = []
    hooks: dict = {"slow": {}}
    progress = tasks.DbSink.progress

    def slowed(self, stage, fraction, message):
        calls.append((stage, fraction))
        time.sleep(hooks["slow"].get(stage, 0.0))
        if stage in hooks:
            hooks[stage](self.job_id, fraction)
        progress(self, stage, fraction, message)

    monkeypatch.setattr(tasks.DbSink, "progress", slowed)
    with TestClient(create_app(settings)) as client:
        yield client, team_key_for(settings), calls, hooks


def submit(client, auth, body=JOB) -> str:
    resp = client.post("/v1/jobs", json=body, headers=auth)
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]


def events(client, auth, job_id) -> list[dict]:
    return client.get(f"/v1/jobs/{job_id}/events?limit=500", headers=auth).json()["data"]


def test_progress_is_monotone_and_the_eta_null_until_measured_then_set(here):
    from worker import tasks

    client, auth, calls, hooks = here
    hooks["slow"] = {"calibrate": 0.15, "evaluate": 0.02}
    job_id = submit(client, auth)
    assert tasks.run_job(job_id) == "succeeded"
    job = client.get(f"/v1/jobs/{job_id}", headers=auth).json()
    assert (job["progress"], job["stage_progress"], job["eta_seconds"]) == (1.0, 1.0, None)
    figures = [e for e in events(client, auth, job_id) if e["kind"] in ("stage", "progress", "log")]
    assert {e["stage"] for e in figures} >= {"load", "calibrate", "score", "compress", "evaluate", "publish"}
    progress = [e["progress"] for e in figures]
    assert progress == sorted(progress) and progress[-1] == pytest.approx(1.0)
    assert all(0 <= e["stage_progress"] <= 1 for e in figures)
    etas = [e["eta_seconds"] for e in figures]
    first = next(i for i, x in enumerate(etas) if x is not None)
    assert figures[0]["eta_seconds"] is None and all(x is not None for x in etas[first:-1]), etas
    rates = [e["data"]["rate"] for e in figures if (e["data"] or {}).get("rate")]
    assert any(r["unit"] == "tokens/s" for r in rates) and any(r["unit"] == "documents/s" for r in rates)
    # calibration reported after every batch: its stage progress is seen climbing, not only 0 and 1
    assert len({round(f, 3) for s, f in calls if s == "calibrate"}) > 3


@pytest.mark.parametrize("route", ["cache hit", "loss probe"])
def test_a_cancel_during_scoring_is_seen_inside_the_scoring(here, route):
    """Scoring from a statistics cache entry reports after every layer, the loss probe after every layer
    pass: the sink, slowed to one report in 0.6 s, writes (and checks for a cancel) within the stage."""
    from worker import tasks

    client, auth, calls, hooks = here
    body = {**JOB, "evaluation": {"perplexity": []}}
    if route == "cache hit":
        assert tasks.run_job(submit(client, auth, body)) == "succeeded"  # fills the statistics cache
    else:
        body = {
            **body,
            "compression": {"mode": "attn", "k": 1, "criterion": "loss"},
            "calibration": {**JOB["calibration"], "num_samples": 20},
        }
    job_id = submit(client, auth, body)
    asked: list[float] = []

    def cancel_once(jid, fraction):
        if 0 < fraction < 1 and not asked:
            asked.append(fraction)
            assert client.post(f"/v1/jobs/{jid}/cancel", headers=auth).json()["status"] == "cancelling"

    hooks["score"] = cancel_once
    hooks["slow"] = {"score": 0.6}
    assert tasks.run_job(job_id) == "cancelled"
    job = client.get(f"/v1/jobs/{job_id}", headers=auth).json()
    assert job["status"] == "cancelled" and job["stage"] == "score" and 0 < job["stage_progress"] < 1, job
    assert asked and not any(s == "compress" for s, _ in calls[calls.index(("score", asked[0])) :])


def test_a_cancel_during_evaluation_is_seen_inside_a_forward_pass(here):
    """Evaluation re-reports before every decoder layer's forward (4 here): with the sink slowed to 0.1 s
    a report, it writes, and sees the cancel, within the base model's 4 windows."""
    from worker import tasks

    client, auth, calls, hooks = here
    job_id = submit(client, auth)
    seen: list[float] = []

    def cancel_on_the_second(jid, fraction):  # the first, the stage's start, is written at once
        seen.append(fraction)
        if len(seen) == 2:
            client.post(f"/v1/jobs/{jid}/cancel", headers=auth)

    hooks["evaluate"] = cancel_on_the_second
    hooks["slow"] = {"evaluate": 0.1}
    assert tasks.run_job(job_id) == "cancelled"
    job = client.get(f"/v1/jobs/{job_id}", headers=auth).json()
    assert job["stage"] == "evaluate" and "base" not in (job["metrics"] or {}), job  # not even the base was measured
    assert len(seen) >= 2


def test_evaluation_reports_within_each_window_and_climbs_to_one(tmp_path):
    """evaluate_outputs on a tiny Llama (4 layers, 256-token windows): a report before every layer's
    forward, a step for each layer a window's forward has passed (issue 38: a one-window evaluation moved
    from 0 to 1 in one jump), then the next window; one model's share after another."""
    from testkit.models import tiny_model, tiny_tokenizer

    from worker.engine.loading.load import LoadedModel
    from worker.eval.compare import evaluate_outputs
    from worker.eval.evaluate import EvalSpec

    lm = LoadedModel(tiny_model(), tiny_tokenizer(), "tiny", None, "f" * 16, "llama", tmp_path)
    reports: list[float] = []
    evaluate_outputs(
        lm,
        {},
        EvalSpec(perplexity=("wikitext2",), max_tokens=1024),
        use_cache=False,
        report=lambda stage, f, msg: reports.append(f),
        data_dir=DATA_DIR,
    )
    assert reports == sorted(reports) and reports[0] == 0.0 and reports[-1] == 1.0
    windows = 1024 // 256
    assert len(reports) >= windows * 4  # 4 layer forwards a window
    assert len({f for f in reports if 0 < f < 1}) == windows * 4 - 1  # a step per layer forward, but the first
