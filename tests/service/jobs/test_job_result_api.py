"""The job's typed `result` and the marked `/layers`, through the API on SQLite and Postgres: written
by the worker's store path, read back nested with deltas; old rows read as nulls; no NaN or
Infinity in any answer (JSON has none); every field of the result documented in the OpenAPI."""

from __future__ import annotations

import json
import math

from sqlalchemy import update
from testkit.service_lib import body

from service.core.models import Job
from service.jobs import lease, states, store

BASE = {
    "perplexity/wikitext2/ppl": 20.0,
    "perplexity/wikitext2/bits_per_byte": 1.0,
    "perplexity/wikitext2/tokens": 4096.0,
    "tasks/arc_easy/acc": 0.5,
    "tasks/arc_easy/acc_stderr": 0.05,
    "tasks/arc_easy/acc_norm": 0.4,
    "tasks/arc_easy/n": 40.0,
    "params/params": 1000.0,
    "params/non_embedding_params": 800.0,
    "speed/prefill_tokens_per_s/128": 2000.0,
    "speed/decode_tokens_per_s": 50.0,
    "speed/sparsity": 0.0,
}
K1 = {
    **BASE,
    "perplexity/wikitext2/ppl": 25.0,
    "tasks/arc_easy/acc": 0.45,
    "params/non_embedding_params": 700.0,
    "speed/prefill_tokens_per_s/128": 3000.0,
    "speed/sparsity": 0.125,
    "tasks/arc_easy/acc_norm": float("nan"),
}


def strict_json(text: str):
    """The body parsed refusing NaN/Infinity, and dumped back the same way."""

    def refuse(c):
        raise AssertionError(f"non-finite number {c} in a response")

    data = json.loads(text, parse_constant=refuse)
    json.dumps(data, allow_nan=False)
    return data


def scores(n: int) -> list[dict]:
    """Engine-format scores: layer 2's cca is NaN (a degenerate layer), every cond infinite."""

    def mode(i):
        return {
            "cca_bound": float("nan") if i == 2 else [3.0, 1.0, 0, 2.0][i],
            "nmse": 0.1 * i,
            "cosine": 0.9 - 0.1 * i,
            "cond": float("inf"),
            "heldout_nmse": 0.2,
        }

    return [{"layer": i, "attn": mode(i), "block": mode(i)} for i in range(n)]


def test_result_is_typed_with_deltas_and_layers_are_marked(client, auth, sessions):
    spec = body(k=[1, 2])
    spec["compression"]["criterion"] = "cca"  # ranks below are the CCA bound's (the default is cosine)
    job_id = client.post("/v1/jobs", json=spec, headers=auth).json()["id"]
    queued = strict_json(client.get(f"/v1/jobs/{job_id}", headers=auth).text)["result"]
    assert queued["calibration"] is None and queued["base"] is None
    assert [(o["k"], o["layers"], o["metrics"], o["delta"]) for o in queued["outputs"]] == [
        (1, None, None, None),
        (2, None, None, None),
    ]
    with sessions() as s:  # as worker/tasks.py writes them
        token = lease.claim_job(s, job_id, 60)
        assert store.save_layer_scores(s, job_id, scores(4), lease_token=token)
        assert store.save_metrics(s, job_id, "base", BASE, lease_token=token)
        assert store.save_metrics(s, job_id, "k1", K1, lease_token=token)
        assert store.set_selected_layers(
            s,
            job_id,
            [{"k": 1, "mode": "attn", "layers": [1]}, {"k": 2, "mode": "attn", "layers": [1, 3]}],
            lease_token=token,
        )
        assert store.save_metrics(
            s, job_id, "calibration", {"tokens": 524288, "seconds": 12.5, "cached": 0.0}, lease_token=token
        )
        assert states.finish(s, job_id, token, "succeeded")

    r = client.get(f"/v1/jobs/{job_id}", headers=auth)
    job = strict_json(r.text)
    res = job["result"]
    assert res["calibration"] == {"tokens": 524288, "seconds": 12.5, "cached": False}
    assert res["base"]["perplexity"] == {"wikitext2": {"ppl": 20.0, "bits_per_byte": 1.0, "tokens": 4096}}
    assert res["base"]["tasks"]["arc_easy"] == {"acc": 0.5, "acc_norm": 0.4, "n": 40, "ppl": None}
    k1, k2 = res["outputs"]
    assert (k1["k"], k1["mode"], k1["method"], k1["criterion"], k1["layers"]) == (1, "attn", "nbl", "cca", [1])
    assert k1["metrics"]["tasks"]["arc_easy"]["acc_norm"] is None  # NaN stored as null
    assert (
        k1["delta"]["perplexity"]["wikitext2"]["ppl"] == 5.0
        and k1["relative"]["perplexity"]["wikitext2"]["ppl"] == 0.25
    )
    assert math.isclose(k1["delta"]["tasks"]["arc_easy"]["acc"], -0.05)
    assert k1["delta"]["params"]["non_embedding_params"] == -100 and k1["relative"]["speed"]["sparsity"] is None
    assert k1["relative"]["speed"]["prefill_tokens_per_s"] == {"128": 0.5}
    assert k2["layers"] == [1, 3] and k2["metrics"] is None and k2["relative"] is None  # not evaluated
    assert job["metrics"]["k1"]["perplexity/wikitext2/ppl"] == 25.0  # the deprecated flat map stays

    listed = strict_json(client.get("/v1/jobs", headers=auth).text)["data"]
    assert [j["result"] for j in listed if j["id"] == job_id] == [res]

    layers = strict_json(client.get(f"/v1/jobs/{job_id}/layers", headers=auth).text)["data"]
    assert [(e["layer"], e["attn"]["cond"], e["attn"]["cca_bound"]) for e in layers] == [
        (0, None, 3.0),
        (1, None, 1.0),
        (2, None, None),
        (3, None, 2.0),
    ]  # inf and NaN: null
    marks = {e["layer"]: {m["k"]: (m["selected"], m["rank"]) for m in e["outputs"]} for e in layers}
    # cca ranks lowest first, the NaN layer last: 1, 3, 0, 2
    assert marks == {
        0: {1: (False, 3), 2: (False, 3)},
        1: {1: (True, 1), 2: (True, 1)},
        2: {1: (False, 4), 2: (False, 4)},
        3: {1: (False, 2), 2: (True, 2)},
    }


def test_old_rows_read_as_nulls(client, auth, sessions):
    """A row written before `result` existed (flat names of another era, no calibration facts, a
    selection without a mode) reads back with nulls, not an error."""
    job_id = client.post("/v1/jobs", json=body(k=4), headers=auth).json()["id"]
    with sessions() as s:
        s.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(
                metrics={"base": {"perplexity/wikitext2": 20.5, "nan": None}, "k4": {"odd": 1.0}},
                selected_layers=[{"k": 4, "layers": [2, 5, 6, 7]}],
            )
        )
        s.commit()
    r = client.get(f"/v1/jobs/{job_id}", headers=auth)
    assert r.status_code == 200, r.text
    res = strict_json(r.text)["result"]
    assert res["calibration"] is None and res["base"] == {"perplexity": {}, "tasks": {}, "speed": None, "params": None}
    (out,) = res["outputs"]
    assert out["layers"] == [2, 5, 6, 7] and out["mode"] == "attn" and out["metrics"]["perplexity"] == {}
    layers = client.get(f"/v1/jobs/{job_id}/layers", headers=auth)
    assert layers.status_code == 200 and layers.json()["data"] == []  # no scores stored: nothing to mark


def test_event_figures_are_finite(client, auth, sessions):
    """A stage's figures with an unmeasured rate (inf, NaN) are stored and shown as null; Postgres'
    JSON refuses NaN outright, so unsanitised the write itself fails there."""
    job_id = client.post("/v1/jobs", json=body(k=4), headers=auth).json()["id"]
    with sessions() as s:
        store.add_event(
            s,
            job_id,
            "progress",
            "scoring",
            stage="score",
            progress=float("nan"),
            data={"rate": float("inf"), "eta_seconds": float("nan"), "done": [1, float("-inf")], "n": 3},
        )
    (ev,) = [
        e
        for e in strict_json(client.get(f"/v1/jobs/{job_id}/events", headers=auth).text)["data"]
        if e["kind"] == "progress"
    ]
    assert ev["progress"] is None and ev["data"] == {"rate": None, "eta_seconds": None, "done": [1, None], "n": 3}


def test_the_result_is_documented(client):
    spec = strict_json(client.get("/openapi.json").text)
    defs = spec["components"]["schemas"]
    job = defs.get("JobOut") or defs["JobOut-Output"]
    assert job["properties"]["metrics"]["deprecated"] is True and "result" in job["required"]
    for name in (
        "JobResult",
        "CalibrationFacts",
        "OutputResult",
        "Metrics",
        "MetricsRelative",
        "PerplexityMetrics",
        "TaskMetrics",
        "SpeedMetrics",
        "ParamMetrics",
        "LayerMark",
        "SelectedLayers",
    ):
        for field, prop in defs[name]["properties"].items():
            assert prop.get("description"), f"{name}.{field} has no description"
    for name in ("CalibrationFacts", "OutputResult", "PerplexityMetrics", "TaskMetrics", "ParamMetrics", "LayerMark"):
        for field, prop in defs[name]["properties"].items():  # a nested model has its examples in its fields
            assert prop.get("examples") or "$ref" in json.dumps(prop), f"{name}.{field} has no example"
