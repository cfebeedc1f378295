"""A gate failure on the real SmolLM2 through a real worker (Postgres, Redis, `celery worker`): 8 of its
30 attention branches replaced after 8 x 128 calibration tokens raise its WikiText-2 perplexity far more
than the +5 % the job allows, so the job fails with error.type "quality", publishes nothing, and says
why: the failed check and the run's warning that 1,024 tokens are fewer than 10·d = 5,760."""

from __future__ import annotations

import pytest
from publish_helpers import run_smollm2_job

pytestmark = pytest.mark.slow

JOB = {
    "model": {"id": "local:smollm2"},
    "calibration": {"dataset": "c4", "num_samples": 8, "seq_len": 128},
    "compression": {"mode": "attn", "criterion": "cca", "k": 8},
    "evaluation": {"perplexity": ["wikitext2"], "max_tokens": 2048},
    "gates": {"max_ppl_increase": {"wikitext2": 0.05}},
    "publish": {"local_dir": "smol-gated"},
}


def test_smollm2_job_that_fails_its_gate_ends_failed_quality_and_publishes_nothing(
    request, settings_for, team_key_for, tmp_path
):
    settings, job, events, log = run_smollm2_job(request, settings_for, team_key_for, tmp_path, JOB, 600)

    assert job["status"] == "failed" and job["error"]["type"] == "quality", (job, log.read_text()[-4000:])
    (check,) = job["gates"]["checks"]
    base, value = job["metrics"]["base"]["perplexity/wikitext2/ppl"], job["metrics"]["k8"]["perplexity/wikitext2/ppl"]
    assert check["base"] == pytest.approx(base) and check["value"] == pytest.approx(value) and value > base * 1.05
    assert check["passed"] is False and "k8 perplexity/wikitext2/ppl" in job["error"]["message"]
    assert job["artifacts"] == [] and not (settings.publish_dir / "alpha" / "smol-gated").exists()
    warnings = [e["message"] for e in events if e["kind"] == "warning"]
    assert any(w.startswith("calibration on 1,024 tokens, fewer than 10·d = 5,760") for w in warnings), warnings
