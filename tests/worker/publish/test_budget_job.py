"""k auto's budget holds on the evaluation, through the real parts (Postgres, Redis, a `celery worker` process, a
tiny Llama as `local:tiny`): the budget the selection data kept but the evaluation broke fails the job with
error.type "quality" and publishes nothing (`nbl wait` exits 5); with `budget.enforce: false` the output is
published and the broken budget is a warning, in the job's warnings and on the card. Never silent.

The tiny model (same model, data and seeds, so the same every run): k auto at +1 % keeps a set within the budget
on the 250 held-out C4 blocks (7,750 tokens, enough to resolve +1 % under nbl/selection/rise_error.py's prior, so the
submit check lets it through and the run does not warn that the rise is unresolved), while WikiText-2 rises
over it: the budget held where it was measured and broke on another corpus. The test asserts that premise from
the unenforced job's own numbers before relying on it.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from huggingface_hub import ModelCard
from publish_helpers import run_jobs, start_worker, stop

from cli.main import main
from service.api import create_app

PPL = "perplexity/wikitext2/ppl"
BUDGET = 0.01
JOB = {
    "model": {"id": "local:tiny"},
    "calibration": {"dataset": "c4", "num_samples": 2500, "seq_len": 32},
    "compression": {
        "mode": "attn",
        "method": "drop",
        "criterion": "cca",
        "k": "auto",
        "budget": {"max_ppl_increase": BUDGET},
    },
    "evaluation": {"perplexity": ["wikitext2"], "max_tokens": 1024},
}


@pytest.mark.slow  # two jobs through a worker: about a minute each on a loaded 2-core machine
def test_a_budget_broken_on_the_evaluation_fails_the_job_unless_not_enforced(deployment, tmp_path, live_server, capsys):
    settings, auth = deployment
    log = tmp_path / "worker.log"
    worker = start_worker(settings, log)
    warn_only = {
        **JOB,
        "compression": {**JOB["compression"], "budget": {"max_ppl_increase": BUDGET, "enforce": False}},
        "publish": {"local_dir": "warned"},
    }
    try:
        with TestClient(create_app(settings)) as c:
            warned, failed = run_jobs(
                c, auth, [warn_only, {**JOB, "publish": {"local_dir": "held"}}], worker, log, timeout=900
            )
    finally:
        stop(worker)

    # the premise: within the budget on the selection data, over it on the evaluation
    assert warned["status"] == "succeeded", (warned, log.read_text()[-4000:])
    (chosen,) = warned["selection"]["chosen"]
    assert chosen["rise"] <= BUDGET and chosen["rise_se"] > 0 and chosen["blocks"] == 250
    k = chosen["k"]
    assert warned["metrics"][f"k{k}"][PPL] > warned["metrics"]["base"][PPL] * (1 + BUDGET)

    # not enforced: published, with the broken budget among the warnings and on the card
    (broken,) = [w for w in warned["warnings"] if w.startswith("k auto's budget is broken on the evaluation")]
    assert f"k{k} {PPL}" in broken and "k auto's budget at most +1%" in broken
    assert chosen["rise_se"] <= BUDGET / 3  # resolved: no "not resolved" warning
    assert not any(w.startswith("k auto's selection rise") and "not resolved" in w for w in warned["warnings"])
    assert warned["gates"] is None and [a["k"] for a in warned["artifacts"]] == [k]
    card = ModelCard.load(settings.publish_dir / "alpha" / "warned" / "README.md")
    assert broken in card.text

    # enforced (the default): failed "quality" naming the check, nothing published
    assert failed["status"] == "failed" and failed["error"]["type"] == "quality", failed
    assert f"k{k} {PPL}" in failed["error"]["message"] and failed["artifacts"] == []
    (check,) = failed["gates"]["checks"]
    assert check["gate"] == "budget" and check["allowed"] == BUDGET and check["passed"] is False
    assert not (settings.publish_dir / "alpha" / "held").exists()

    url = live_server(create_app(settings))
    key = auth["Authorization"].removeprefix("Bearer ")
    capsys.readouterr()
    assert main(["wait", failed["id"], "--api-url", url, "--api-key", key, "--quiet"]) == 5
    assert f"gate k{k} {PPL}" in capsys.readouterr().out
