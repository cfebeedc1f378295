"""A job evaluates WinoGrande and the user's own task files (issue 13 §4), through the real task:
the API stores the job, `worker.tasks.run_job` runs in this process on the embedded SQLite database
and a tiny Llama stored as `local:tiny` (as tests/worker/publish/test_job_outputs.py does). WinoGrande is
read from a Hugging Face cache made here; a task the worker has no data for fails the job `user`
before anything is calibrated.

The fresh-process load check is skipped (tests/worker/publish/test_loadcheck.py covers it).
"""

from __future__ import annotations

import json

import pytest
from eval_helpers import hf_cache_with_winogrande, winogrande_rows
from fastapi.testclient import TestClient
from testkit.models import save_tiny_checkpoint

from nbl.data.task_records import parse_lines
from service.api import create_app

pytestmark = pytest.mark.usefixtures("one_thread")
RECORDS = [
    {"contexts": [f"{a} was faster than {b}, so {x}" for x in (a, b)], "continuation": " won the race.", "label": i % 2}
    for i, (a, b) in enumerate([("Sarah", "Maria"), ("Jim", "Kevin"), ("Anna", "Beth")])
]
TEXT = "".join(json.dumps(r) + "\n" for r in RECORDS)


def job(tasks: list[str]) -> dict:
    return {
        "model": {"id": "local:tiny"},
        "calibration": {"dataset": "c4", "num_samples": 10, "seq_len": 32},
        "compression": {"mode": "attn", "k": 1},
        "evaluation": {
            "perplexity": [],
            "tasks": tasks,
            "limit": 4,
            "task_files": [{"name": "wino_like", "jsonl": TEXT}],
        },
        "publish": {"local_dir": "out"},
    }


@pytest.fixture
def api(sqlite_clean_url, settings_for, team_key_for, monkeypatch, tmp_path):
    import datasets.config

    from worker import pipeline, tasks

    hf_cache_with_winogrande(tmp_path / "hf", winogrande_rows(6))  # the worker's cache: WinoGrande, no PIQA
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf"))
    settings = settings_for(sqlite_clean_url)
    settings.ensure_dirs()
    save_tiny_checkpoint(settings.models_dir / "tiny")
    monkeypatch.setattr(tasks, "settings", settings)
    monkeypatch.setattr(tasks, "_sessions", None)
    monkeypatch.setattr(pipeline, "check", lambda outputs, refs, sink, timeout_s, devices=None: None)
    with TestClient(create_app(settings)) as client:
        yield settings, client, team_key_for(settings, "alpha")


def run(client, auth, body) -> dict:
    from worker import tasks

    r = client.post("/v1/jobs", json=body, headers=auth)
    assert r.status_code == 201, r.text
    tasks.run_job(r.json()["id"])
    return client.get(f"/v1/jobs/{r.json()['id']}", headers=auth).json()


@pytest.mark.slow
def test_a_job_scores_winogrande_and_a_contexts_task_file_as_the_evaluation_does(api):
    from worker.engine.loading.load import load_model
    from worker.eval.benchmarks.registry import load_task
    from worker.eval.benchmarks.task_file import task_of_records
    from worker.eval.harness import run_task

    settings, client, auth = api
    done = run(client, auth, job(["winogrande"]))
    assert done["status"] == "succeeded", done
    base, k1 = done["metrics"]["base"], done["metrics"]["k1"]
    for variant in (base, k1):
        assert variant["tasks/winogrande/n"] == 4 and variant["tasks/wino_like/n"] == 3
        assert "tasks/winogrande/acc_norm" not in variant and "tasks/wino_like/acc_norm" not in variant

    lm = load_model(str(settings.models_dir / "tiny"))  # the base, scored here by the evaluation's own functions
    wino = run_task(lm.model, lm.tokenizer, load_task("winogrande", 4))
    mine = run_task(lm.model, lm.tokenizer, task_of_records("wino_like", *parse_lines(TEXT.splitlines(), str)))
    assert base["tasks/winogrande/acc"] == pytest.approx(wino["acc"])
    assert base["tasks/wino_like/acc"] == pytest.approx(mine["acc"])
    typed = done["result"]["base"]["tasks"]  # the typed result carries them too
    assert typed["wino_like"]["acc"] == base["tasks/wino_like/acc"] and typed["winogrande"]["acc_norm"] is None

    stages = {e["stage"] for e in client.get(f"/v1/jobs/{done['id']}/events", headers=auth).json()["data"]}
    assert {"load", "calibrate"} <= stages, stages  # what the failed job below must not reach

    card = next((settings.publish_dir / "alpha" / "out").rglob("README.md")).read_text()
    assert "wino_like" in card and "Sarah" not in card  # the file by digest, not its text


def test_a_task_without_data_on_the_worker_fails_the_job_before_calibration(api):
    settings, client, auth = api
    done = run(client, auth, job(["winogrande", "piqa"]))
    assert done["status"] == "failed" and done["error"]["type"] == "user", done
    assert "piqa: lm-eval's dataset is not" in done["error"]["message"]  # winogrande is cached: not named
    assert "winogrande: lm-eval's" not in done["error"]["message"], done["error"]
    events = client.get(f"/v1/jobs/{done['id']}/events", headers=auth).json()
    assert {e["stage"] for e in events["data"]} & {"load", "calibrate"} == set(), events
