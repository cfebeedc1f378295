"""Refit and healing on the real SmolLM2 through a real worker (Postgres, Redis, `celery worker`): the job refits
its 4 replaced attention branches and heals them, passes the fresh-process load check against the refined maps,
publishes, and says what it did in the typed result, the events and the card; its selection dataset (WikiText-2,
not the calibration's C4) guards the heal. The published output, reloaded,
gives the perplexity the worker measured."""

from __future__ import annotations

import pytest
from publish_helpers import run_smollm2_job

pytestmark = pytest.mark.slow

JOB = {
    "model": {"id": "local:smollm2"},
    "calibration": {"dataset": "c4", "num_samples": 8, "seq_len": 128},
    "compression": {
        "mode": "attn",
        "criterion": "cca",
        "k": 4,
        "refit": "sequential",
        "heal": {"tokens": 1024, "steps": 4},
    },
    "evaluation": {"perplexity": ["wikitext2"], "max_tokens": 1024},
    "selection": {"dataset": "wikitext2", "num_samples": 2},  # not the calibration's: the heal's guard
    "publish": {"local_dir": "smol-refined"},
}


def test_smollm2_job_refits_heals_checks_and_publishes(request, settings_for, team_key_for, tmp_path):
    settings, job, events, log = run_smollm2_job(request, settings_for, team_key_for, tmp_path, JOB, 1200)

    assert job["status"] == "succeeded", (job, log.read_text()[-4000:])
    stages = [e["stage"] for e in events if e["kind"] == "stage"]
    assert stages.index("score") < stages.index("refine") < stages.index("compress") < stages.index("check")
    (out,) = job["result"]["outputs"]
    assert out["refit"]["seconds"] > 0 and out["refit"]["cached"] is False
    heal = out["heal"]
    # 1,024 tokens: 7 training blocks of 128 and 1 held out; 4 steps of 2 blocks each (the last wraps round)
    assert (heal["steps"], heal["tokens"], heal["lr"]) == (4, 4 * 2 * 128, 1e-5) and heal["seconds"] > 0
    assert heal["perplexity_before"] > 0 and heal["guard_perplexity_before"] > 0
    assert heal["kept"] == (
        heal["perplexity_after"] <= heal["perplexity_before"]
        and heal["guard_perplexity_after"] <= heal["guard_perplexity_before"]
    )

    published = settings.publish_dir / "alpha" / "smol-refined"
    card = (published / "README.md").read_text()
    assert "## Refinement" in card and "Sequential refit" in card and "1,024 tokens in 4 steps" in card
    assert "tokens of the selection dataset (the guard)" in card
    assert '"refit": "sequential"' in card  # the request, quoted

    import torch
    from testkit.models import DATA_DIR
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from worker.eval.perplexity import corpus_text, perplexity

    model = AutoModelForCausalLM.from_pretrained(published, trust_remote_code=True, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(published, trust_remote_code=False)
    got = perplexity(model, tok, corpus_text("wikitext2", DATA_DIR), max_tokens=1024, progress=False)["ppl"]
    assert got == pytest.approx(out["metrics"]["perplexity"]["wikitext2"]["ppl"], rel=1e-5)
