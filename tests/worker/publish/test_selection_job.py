"""Measured selection through the real parts (Postgres, Redis, a `celery worker` process, a tiny Llama as
`local:tiny`): a job with criterion auto and k auto stores what it measured, the criterion that won is on the job,
on /layers and on the card, with the held-out table; the output replaces the layers the table kept."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient
from huggingface_hub import ModelCard
from publish_helpers import run_jobs, start_worker, stop

from nbl.selection.rise_error import tokens_needed
from service.api import create_app

BUDGET = 1.0  # any rise the tiny model shows fits +100%
HELD = -(-tokens_needed(BUDGET) // 31)  # held-out blocks of 32 that resolve it (a smaller one is refused at submit)
JOB = {
    "model": {"id": "local:tiny"},
    "calibration": {"dataset": "c4", "num_samples": 10 * HELD, "seq_len": 32},
    "compression": {
        "mode": "attn",
        "method": "nbl",
        "criterion": "auto",
        "k": "auto",
        "budget": {"max_ppl_increase": BUDGET},
    },
    "evaluation": {"perplexity": [], "tasks": []},
    "publish": {"local_dir": "auto"},
}


def test_a_criterion_auto_k_auto_job_records_the_table_and_the_winner(deployment, tmp_path):
    settings, auth = deployment
    log = tmp_path / "worker.log"
    worker = start_worker(settings, log)
    try:
        with TestClient(create_app(settings)) as c:
            (job,) = run_jobs(c, auth, [JOB], worker, log)
            layers = c.get(f"/v1/jobs/{job['id']}/layers", headers=auth).json()["data"]
            events = c.get(f"/v1/jobs/{job['id']}/events", headers=auth).json()["data"]
    finally:
        stop(worker)
    assert job["status"] == "succeeded", (job, log.read_text()[-4000:])
    sel = job["selection"]
    stages = [e["stage"] for e in events if e.get("stage")]
    assert "select" in stages and stages.index("select") > stages.index("score")  # its own stage, priced by the plan
    assert (
        sel["k"] == 3 and sel["data"]["in_distribution"] is True
    )  # any rise the tiny model shows fits +100%: 4 layers - 1
    assert sel["tokens"] == HELD * 31  # the held-out tenth of 10 x HELD blocks of 32
    at3 = {t["criterion"]: t for t in sel["tried"] if t["k"] == 3}
    assert set(at3) == {"cca", "cosine", "nmse", "greedy"}
    (won,) = sel["chosen"]
    assert at3[won["criterion"]]["heldout_ppl"] == min(t["heldout_ppl"] for t in at3.values())
    assert job["selected_layers"] == [  # the saved dtype is stored too, and shown in the result, not here
        {"k": 3, "mode": "attn", "layers": won["layers"], "criterion": won["criterion"], "family": "llama"}
    ]
    assert job["result"]["outputs"][0]["dtype"] == "float32"  # publish.dtype auto: the tiny base's
    marks = [m for row in layers for m in row["outputs"]]
    assert {m["criterion"] for m in marks} == {won["criterion"]}
    assert sorted(row["layer"] for row in layers if row["outputs"][0]["selected"]) == won["layers"]
    out = settings.publish_dir / "alpha" / "auto"
    assert (
        json.loads((out / "nbl_scores.json").read_text())["recipe"]["max_ppl_increase"] == BUDGET
    )  # the plot's budget line
    assert (out / "nbl_scores.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    card = ModelCard.load(out / "README.md")
    assert "## Selection" in card.text and f"This output (k=3): **{won['criterion']}**" in card.text
    assert "held-out tenth (in-distribution" in card.text and f"| 3 | greedy | {at3['greedy']['layers']} |" in card.text
