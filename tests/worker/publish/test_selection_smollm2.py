"""k auto on the real SmolLM2 through a real worker (Postgres, Redis, `celery worker`): criterion auto, a 20 %
budget on the selection data's perplexity, WikiText-2 *validation* as selection data. The job must publish the
largest k whose best layer set stays within the budget: every k the bisection tried is on the job with its
measured perplexity, those within the budget are exactly those up to the k it kept, and the published output
replaces the layers the table kept."""

from __future__ import annotations

import json
import math

import pytest
from publish_helpers import run_smollm2_job

pytestmark = pytest.mark.slow
BUDGET = 0.20

JOB = {
    "model": {"id": "local:smollm2"},
    "calibration": {"dataset": "c4", "num_samples": 8, "seq_len": 128},
    "compression": {
        "mode": "attn",
        "method": "nbl",
        "criterion": "auto",
        "k": "auto",
        "budget": {"max_ppl_increase": BUDGET},
    },
    "selection": {"dataset": "wikitext2", "split": "validation", "num_samples": 4},
    "evaluation": {"perplexity": [], "tasks": []},
    "publish": {"local_dir": "smol-auto-k"},
}


def test_smollm2_k_auto_job_publishes_the_largest_k_within_the_budget(request, settings_for, team_key_for, tmp_path):
    settings, job, events, log = run_smollm2_job(request, settings_for, team_key_for, tmp_path, JOB, 900)

    assert job["status"] == "succeeded", (job, log.read_text()[-4000:])
    sel = job["selection"]
    assert sel["data"]["in_distribution"] is False and sel["data"]["split"] == "validation"
    assert sel["tokens"] == 4 * 127  # 4 validation blocks of 128, next-token targets
    k, limit = sel["k"], sel["base_ppl"] * (1 + BUDGET)
    best = {}  # each tried k -> its best set's selection perplexity (None: not finite, over any budget)
    for t in sel["tried"]:
        ppl = t["heldout_ppl"] if t["heldout_ppl"] is not None else math.inf
        best[t["k"]] = min(best.get(t["k"], math.inf), ppl)
        if t["criterion"] in ("cca", "cosine", "nmse", "greedy"):
            assert len(t["layers"]) == t["k"]
    assert {c for t in sel["tried"] if t["k"] == k for c in [t["criterion"]]} == {"cca", "cosine", "nmse", "greedy"}
    assert 1 <= k < 30 and best[k] <= limit
    assert all((ppl <= limit) == (tk <= k) for tk, ppl in best.items()), best  # the bisection's verdicts
    assert k + 1 in best or k == 29  # the k above the kept one was measured and failed

    (won,) = sel["chosen"]
    assert won["k"] == k
    config = json.loads((settings.publish_dir / "alpha" / "smol-auto-k" / "config.json").read_text())
    assert job["selected_layers"] == [
        {"k": k, "mode": "attn", "layers": won["layers"], "criterion": won["criterion"], "family": "llama"}
    ]
    assert job["result"]["outputs"][0]["dtype"] == config["dtype"]  # the saved weights', as config.json says
    assert config["nbl"]["layers"] == won["layers"] and config["nbl"]["mode"] == "attn"
