"""A k auto job (issue 13 §1) is estimated as the one output it makes."""

from __future__ import annotations

from testkit.model_configs import TINY, write_config

from nbl.selection.rise_error import tokens_needed


def test_a_k_auto_job_is_estimated_as_one_output(settings, client, auth):
    write_config(settings.models_dir / "tiny", TINY)
    one = {"model": {"id": "local:tiny"}, "calibration": {"num_samples": 8, "seq_len": 32}, "compression": {"k": 1}}
    auto = {
        **one,
        "compression": {"k": "auto", "criterion": "greedy", "budget": {"max_ppl_increase": 0.1}},
        "selection": {"dataset": "wikitext2", "num_samples": -(-tokens_needed(0.1) // 31)},
    }  # resolves the budget
    a, b = (client.post("/v1/estimates", json=body, headers=auth) for body in (one, auto))
    assert a.status_code == b.status_code == 200, b.text
    assert b.json()["disk"] == a.json()["disk"] and b.json()["disk"]  # one output's bytes
