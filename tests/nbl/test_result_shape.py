"""nbl/result.py, the one shape of a job's result: the stored flat names nest into the same
metrics an evaluation result gives, deltas and relative changes follow the model's shape, and no
NaN or Infinity survives (JSON has none)."""

from __future__ import annotations

import json
import math

from nbl.result import delta, finite, job_result, metrics_of, nest, relative
from nbl.result_schema import JobResult
from worker.eval_stage import flatten


def evaluation(ppl: float, acc: float, tps: float, params: int) -> dict:
    """An evaluation result as worker/eval/evaluate.py returns it."""
    return {
        "model": {"source": "m"},
        "params": {"params": params + 1000, "non_embedding_params": params},
        "perplexity": {"wikitext2": {"ppl": ppl, "bits_per_byte": math.log2(ppl) / 4, "tokens": 245_569}},
        "tasks": {"arc_easy": {"acc": acc, "acc_stderr": 0.01, "acc_norm": None, "acc_norm_stderr": None, "n": 40}},
        "speed": {
            "prefill_tokens_per_s": {"128": tps, "4096": None},
            "decode_tokens_per_s": tps / 10,
            "decode_context": 512,
            "new_tokens": 64,
            "kv_cache_bytes_per_token": 9216.0,
            "kv_cache_layers": 30,
            "params": params + 1000,
            "non_embedding_params": params,
            "base_non_embedding_params": 106_200_000,
            "sparsity": 0.0,
            "repeats": 3,
            "device": "cpu",
            "dtype": "float32",
            "threads": 2,
        },
        "seconds": {},
    }


def strict(obj) -> str:
    return json.dumps(obj, allow_nan=False)  # raises on NaN or Infinity


def test_the_stored_flat_names_nest_as_the_evaluation_does():
    """What the worker stores (flatten) reads back as the CLI's nested view, strings aside (the store
    keeps numbers only), with counts as ints."""
    result = evaluation(21.7, 0.6, 3000.0, 106_200_000)
    nested, direct = nest(flatten(result)), metrics_of(result)
    assert nested["speed"].pop("device") is None and nested["speed"].pop("dtype") is None
    assert direct["speed"].pop("device") == "cpu" and direct["speed"].pop("dtype") == "float32"
    assert direct["speed"]["prefill_tokens_per_s"].pop("4096") is None  # a None is not stored: absent
    assert nested == direct
    assert nested["perplexity"]["wikitext2"]["tokens"] == 245_569 and type(nested["tasks"]["arc_easy"]["n"]) is int
    assert nested["tasks"]["arc_easy"] == {"acc": 0.6, "acc_norm": None, "n": 40, "ppl": None}  # no stderr
    assert nest(None) is None and nest({}) is None


def test_delta_and_relative_follow_the_model():
    base = metrics_of(evaluation(20.0, 0.5, 2000.0, 100))
    model = metrics_of(evaluation(25.0, 0.4, 3000.0, 90))
    d, r = delta(model, base), relative(model, base)
    assert d["perplexity"]["wikitext2"]["ppl"] == 5.0 and r["perplexity"]["wikitext2"]["ppl"] == 0.25
    assert math.isclose(d["tasks"]["arc_easy"]["acc"], -0.1)
    assert math.isclose(r["tasks"]["arc_easy"]["acc"], -0.2)
    assert d["params"] == {"params": -10, "non_embedding_params": -10}
    assert r["speed"]["prefill_tokens_per_s"] == {"128": 0.5, "4096": None}
    assert r["speed"]["sparsity"] is None  # a base of 0: no ratio
    assert d["speed"]["device"] is None and d["tasks"]["arc_easy"]["acc_norm"] is None
    assert delta(model, None) is None and relative(None, base) is None


def test_no_nan_or_infinity_survives():
    bad = evaluation(float("inf"), float("nan"), 3000.0, 100)
    base = evaluation(20.0, 0.5, 0.0, 100)
    m, b = metrics_of(bad), metrics_of(base)
    assert m["perplexity"]["wikitext2"]["ppl"] is None and m["tasks"]["arc_easy"]["acc"] is None
    assert nest({"perplexity/w/ppl": float("inf"), "tasks/t/acc": float("nan")}) == {
        "perplexity": {"w": {"ppl": None, "bits_per_byte": None, "tokens": None}},
        "tasks": {"t": {"acc": None, "acc_norm": None, "n": None, "ppl": None}},
        "speed": None,
        "params": None,
    }
    huge = {"perplexity": {"w": {"ppl": 1e308}}}
    tiny = {"perplexity": {"w": {"ppl": -1e308}}}
    assert delta(huge, tiny)["perplexity"]["w"]["ppl"] is None  # overflow to inf: null
    assert relative(huge, {"perplexity": {"w": {"ppl": 1e-308}}})["perplexity"]["w"]["ppl"] is None
    strict([m, b, delta(m, b), relative(m, b), finite({"x": [float("-inf"), (float("nan"),)]})])


def test_job_result_from_stored_rows():
    spec = {"compression": {"k": [4, 8], "mode": "attn", "method": "nbl", "criterion": "cca"}}
    selected = [{"k": 4, "mode": "attn", "layers": [1, 2, 3, 5]}, {"k": 8, "mode": "attn", "layers": list(range(8))}]
    metrics = {
        "calibration": {"tokens": 524288.0, "seconds": 12.5, "cached": 0.0},
        "base": flatten(evaluation(20.0, 0.5, 2000.0, 100)),
        "k4": flatten(evaluation(22.0, 0.45, 2500.0, 90)),
    }
    res = job_result(spec, selected, metrics)
    assert res["calibration"] == {"tokens": 524288, "seconds": 12.5, "cached": False}
    k4, k8 = res["outputs"]
    assert (k4["k"], k4["mode"], k4["method"], k4["criterion"], k4["layers"]) == (4, "attn", "nbl", "cca", [1, 2, 3, 5])
    assert k4["delta"]["perplexity"]["wikitext2"]["ppl"] == 2.0 and math.isclose(
        k4["relative"]["perplexity"]["wikitext2"]["ppl"], 0.1
    )
    assert k8["layers"] == list(range(8)) and k8["metrics"] is None and k8["delta"] is None  # not evaluated yet
    JobResult.model_validate(res)  # the typed schema takes it
    strict(res)


def test_an_old_or_new_row_gives_nulls():
    """A job stored before results were kept, or still queued: nulls, never an error."""
    for spec, selected, metrics in (
        ({}, None, None),
        ({"compression": {"k": 4}}, None, {}),
        ({"compression": {"k": 4, "mode": "block"}}, [{"k": 4, "layers": [1]}], {"calibration": {"tokens": 100.0}}),
    ):
        res = JobResult.model_validate(job_result(spec, selected, metrics)).model_dump()
        assert res["base"] is None
        for out in res["outputs"]:
            assert out["metrics"] is None and out["delta"] is None and out["relative"] is None
    assert job_result({}, None, None) == {
        "calibration": None,
        "base": None,
        "base_evaluation": None,
        "base_quantized": [],
        "outputs": [],
    }
    old = job_result(
        {"compression": {"k": 4, "mode": "block"}}, [{"k": 4, "layers": [1]}], {"calibration": {"tokens": 100.0}}
    )
    assert old["calibration"] == {"tokens": 100, "seconds": None, "cached": None}
    assert old["outputs"][0]["mode"] == "block" and old["outputs"][0]["criterion"] is None


def test_the_eval_report_is_finite_and_shares_the_shape():
    """`nbl eval --json` (worker/eval/report.py report): the same nested metrics, delta and relative as a
    job's output, and no Infinity where a measurement overflowed."""
    from worker.eval.report import report

    model, base = evaluation(float("inf"), 0.4, 3000.0, 90), evaluation(20.0, 0.5, 2000.0, 100)
    rep = report(model, base)
    strict(rep)
    out = job_result(
        {"compression": {"k": 4}}, [{"k": 4, "layers": [1]}], {"base": flatten(base), "k4": flatten(model)}
    )["outputs"][0]
    assert rep["perplexity"]["wikitext2"]["ppl"] is None and rep["delta"]["perplexity"]["wikitext2"]["ppl"] is None
    assert rep["delta"]["tasks"] == out["delta"]["tasks"] and rep["relative"]["params"] == out["relative"]["params"]
