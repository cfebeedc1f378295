"""k auto refused at submit when its selection data cannot resolve the budget (nbl/selection/rise_error.py's prior): a 422
naming the field, with the selection tokens (and blocks) that would be enough; that many are accepted."""

from __future__ import annotations

import pytest
from testkit.models import save_tiny_checkpoint

from nbl.selection.rise_error import tokens_needed

BUDGET = 0.01
JOB = {
    "model": {"id": "local:tiny"},
    "calibration": {"dataset": "c4", "num_samples": 20, "seq_len": 32},
    "compression": {
        "mode": "attn",
        "method": "drop",
        "criterion": "cca",
        "k": "auto",
        "budget": {"max_ppl_increase": BUDGET},
    },
    "evaluation": {"perplexity": ["wikitext2"], "max_tokens": 1024},
}


@pytest.mark.parametrize(
    "body,loc,needs",
    [
        (
            {"calibration": {"num_samples": 20, "seq_len": 32}},
            ["body", "selection"],
            "give a selection dataset (selection.dataset) with num_samples >= ",
        ),
        (
            {"selection": {"dataset": "wikitext2", "num_samples": 4}},
            ["body", "selection", "num_samples"],
            "give selection.num_samples >= ",
        ),
    ],
)
def test_k_auto_is_refused_at_submit_when_the_selection_cannot_resolve_the_budget(
    settings, client, auth, body, loc, needs
):
    save_tiny_checkpoint(settings.models_dir / "tiny")
    job = {**JOB, "calibration": {"num_samples": 20, "seq_len": 32}, **body}
    r = client.post("/v1/jobs", json=job, headers=auth)
    assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json"), r.text
    (err,) = [e for e in r.json()["errors"] if e["type"] == "selection_too_small"]
    assert err["loc"] == loc and needs in err["msg"] and f"{tokens_needed(BUDGET):,} selection tokens" in err["msg"]
    enough = -(-tokens_needed(BUDGET) // 31)
    ok = {**job, "selection": {"dataset": "wikitext2", "num_samples": enough}}
    assert client.post("/v1/estimates", json=ok, headers=auth).status_code == 200
