"""`nbl compress --json` is JSON (no Infinity: the tiny model's first layer has a singular C_xx, whose
cond is inf) and carries the API's `result` shape, built by the same function as a job's."""

from __future__ import annotations

import json

import pytest

from cli import main as cli
from nbl.result_schema import JobResult


def strict(text: str):
    def refuse(c):
        raise AssertionError(f"non-finite number {c} in --json output")

    data = json.loads(text, parse_constant=refuse)
    json.dumps(data, allow_nan=False)
    return data


@pytest.mark.slow
def test_compress_json_is_finite_and_has_the_job_result(tiny_dir, text_file, tmp_path, capsys):
    code = cli.main(
        [
            "compress",
            "--model",
            str(tiny_dir),
            "--dataset",
            str(text_file),
            "--num-samples",
            "12",
            "--seq-len",
            "64",
            "--out",
            str(tmp_path / "out"),
            "--json",
            "--k",
            "1,2",
            "--eval",
            "--perplexity",
            "wikitext2",
            "--max-tokens",
            "128",
            "--no-load-check",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    view = strict(captured.out)
    assert any(s["attn"]["cond"] is None for s in view["scores"])  # the singular layer: null, not Infinity
    res = JobResult.model_validate(view["result"]).model_dump()  # the API's schema takes it
    assert res["calibration"]["tokens"] == 12 * 64 and res["calibration"]["cached"] is False
    assert [(o["k"], o["layers"]) for o in res["outputs"]] == [(o["k"], o["replaced_layers"]) for o in view["outputs"]]
    base_ppl = res["base"]["perplexity"]["wikitext2"]["ppl"]
    for out in res["outputs"]:
        rep = view["evaluation"][f"k{out['k']}"]  # `nbl eval --json` of that output: the same numbers
        ppl = out["metrics"]["perplexity"]["wikitext2"]["ppl"]
        assert ppl == rep["perplexity"]["wikitext2"]["ppl"] and out["delta"]["perplexity"] == rep["delta"]["perplexity"]
        assert out["relative"]["perplexity"]["wikitext2"]["ppl"] == pytest.approx((ppl - base_ppl) / base_ppl)
        assert out["relative"] == rep["relative"]
