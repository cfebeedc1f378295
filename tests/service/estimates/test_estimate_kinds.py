"""The estimate prices each stage from rows of the kind of work it will do (issue 38 item 1): a calibration the
class's statistics cache holds from cache-hit calibrations only, a fresh one from fresh ones only, however
many cache hits came since; GGUF exports per type; the range from the spread of the rows. Against the real
database, rows as a worker writes them (worker/rates.py, worker/host/caches.py)."""

from __future__ import annotations

from testkit.model_configs import TINY, write_config

from nbl.recipe import from_request
from nbl.request import JobCreate
from nbl.sizing.kinds import stage_kinds
from nbl.sizing.rates import FLOOR, shape_key
from nbl.sizing.reuse import STATISTICS, statistics_key
from nbl.sizing.stage_plan import plan
from service.core.class_cache import ClassCache
from service.core.models import utcnow
from service.core.stage_rate import StageRate
from worker import rates

JOB = {
    "model": {"id": "local:tiny"},
    "calibration": {"num_samples": 8, "seq_len": 32},
    "compression": {"k": 1},
}
GGUF = {
    **JOB,
    "compression": {"k": 1, "mode": "block", "form": "fold"},
    "publish": {"local_dir": "out", "formats": ["safetensors", "gguf:q4_k_m"]},
}


def add(sessions, queue, shape, job_id, stage, kind, work, seconds):
    with sessions() as s:
        s.add(
            StageRate(
                job_id=job_id,
                worker_class=queue,
                shape=shape,
                stage=stage,
                kind=kind,
                weight=work,
                seconds=seconds,
                created_at=utcnow(),
            )
        )
        s.commit()


def setup(settings, client, auth, body=JOB):
    write_config(settings.models_dir / "tiny", TINY)
    r = client.post("/v1/jobs", json=body, headers=auth)  # a job to hang the rows on
    assert r.status_code == 201, r.text
    job = r.json()
    est = job["estimate"]
    recipe = from_request(JobCreate.model_validate(body))
    return job["id"], est["worker_class"], shape_key(est["shape"]), recipe


def test_cache_hits_never_price_a_fresh_calibration(settings, client, auth, sessions):
    job_id, queue, shape, recipe = setup(settings, client, auth)
    fresh = plan(recipe, TINY["num_hidden_layers"])["calibrate"].weight
    add(sessions, queue, shape, job_id, "calibrate", "fresh/attn", fresh, 200.0)
    for _ in range(3):  # three cache hits since: the old code's rate fell with each
        add(sessions, queue, shape, job_id, "calibrate", "cached/attn", 64.0, 2.0)
    est = client.post("/v1/estimates", json=JOB, headers=auth).json()
    assert est["statistics_cached"] is False
    assert est["stages"]["calibrate"] == {
        "seconds": 200.0,
        "low": 200.0,
        "high": 200.0,
        "measured": True,
        "kind": "fresh/attn",
    }
    with sessions() as s:  # the class's cache now holds the calibration
        s.add(ClassCache(worker_class=queue, kind=STATISTICS, key=statistics_key(recipe), created_at=utcnow()))
        s.commit()
    hit = client.post("/v1/estimates", json=JOB, headers=auth).json()
    assert hit["statistics_cached"] is True and hit["stages"]["calibrate"]["kind"] == "cached/attn"
    cached = plan(recipe, TINY["num_hidden_layers"], stats_cached=True)["calibrate"].weight
    assert hit["stages"]["calibrate"]["seconds"] == round(cached * 2.0 / 64.0, 1)  # a read of the cache
    assert hit["stages"]["calibrate"]["high"] < est["stages"]["calibrate"]["low"]
    other = {**JOB, "calibration": {"num_samples": 8, "seq_len": 32, "seed": 7}}  # another calibration: a miss
    assert client.post("/v1/estimates", json=other, headers=auth).json()["statistics_cached"] is False


def test_a_gguf_export_is_priced_per_type(settings, client, auth, sessions):
    job_id, queue, shape, recipe = setup(settings, client, auth, GGUF)
    assert stage_kinds(recipe, False)["export"] == "gguf:q4_k_m"
    work = plan(recipe, TINY["num_hidden_layers"])["export"].weight
    assert work > 0
    add(sessions, queue, shape, job_id, "calibrate", "fresh/attn", 1000.0, 10.0)  # 100 token-layers/s overall
    first = client.post("/v1/estimates", json=GGUF, headers=auth).json()["stages"]["export"]
    assert first["measured"] is False and first["kind"] == "gguf:q4_k_m" and first["seconds"] > 0
    add(sessions, queue, shape, job_id, "export", "gguf:q4_k_m", work, 7.0)
    add(sessions, queue, shape, job_id, "export", "gguf:f16", work, 2.0)  # another type: not this one's price
    measured = client.post("/v1/estimates", json=GGUF, headers=auth).json()["stages"]["export"]
    assert measured == {"seconds": 7.0, "low": 7.0, "high": 7.0, "measured": True, "kind": "gguf:q4_k_m"}
    plain = {**GGUF, "publish": {"local_dir": "out"}}
    assert "export" not in client.post("/v1/estimates", json=plain, headers=auth).json()["stages"]  # nothing to export


def test_the_range_widens_with_the_spread_of_the_rows(settings, client, auth, sessions):
    job_id, queue, shape, recipe = setup(settings, client, auth)
    costs, kinds = plan(recipe, TINY["num_hidden_layers"]), stage_kinds(recipe, False)
    for stage, cost in costs.items():  # one job: every stage at 100 token-layers/s
        if cost.weight > 0:
            add(sessions, queue, shape, job_id, stage, kinds.get(stage, ""), cost.weight, cost.weight / 100)
    one = client.post("/v1/estimates", json=JOB, headers=auth).json()["seconds"]
    assert one[1] / one[0] < 1.6  # no spread yet: the floor alone
    slow = costs["calibrate"].weight / 100 * 1.3
    add(sessions, queue, shape, job_id, "calibrate", "fresh/attn", costs["calibrate"].weight, slow)
    two = client.post("/v1/estimates", json=JOB, headers=auth).json()
    assert two["stages"]["calibrate"]["high"] == round(slow, 1)
    assert two["seconds"][1] / two["seconds"][0] > one[1] / one[0]  # more spread, a wider range
    assert two["seconds"][1] <= 2 * two["seconds"][0]
    fast = [costs["calibrate"].weight / 100 * f for f in (0.9, 0.95, 0.92)]
    for seconds in fast:  # the last RECENT rows only: the slow one has aged out
        add(sessions, queue, shape, job_id, "calibrate", "fresh/attn", costs["calibrate"].weight, seconds)
    three = client.post("/v1/estimates", json=JOB, headers=auth).json()["stages"]["calibrate"]
    assert (three["low"], three["high"]) == (round(min(fast), 1), round(max(fast), 1))


def test_a_quantization_is_priced_per_scheme(settings, client, auth, sessions):
    body = {**GGUF, "publish": {"local_dir": "out", "quantize": ["w8a8"]}}
    job_id, queue, shape, recipe = setup(settings, client, auth, body)
    costs = plan(recipe, TINY["num_hidden_layers"])
    assert stage_kinds(recipe, False)["quantize"] == "quant:w8a8" and costs["quantize"].units == 2  # output, base
    add(sessions, queue, shape, job_id, "calibrate", "fresh/block", 1000.0, 10.0)  # 100 token-layers/s overall
    first = client.post("/v1/estimates", json=body, headers=auth).json()
    assert first["phases"]["quantize"]["host"] > 0  # the quantization process' memory
    stage = first["stages"]["quantize"]
    assert stage["measured"] is False and stage["kind"] == "quant:w8a8"
    assert (stage["low"], stage["high"]) == (
        round(costs["quantize"].weight / 200, 1),
        round(costs["quantize"].weight / 50, 1),
    )
    with sessions() as s:  # as the worker records a job's stages (worker/tasks.py: the kinds of its recipe)
        assert rates.record(s, job_id, {"quantize": (costs["quantize"].weight, 90.0)}, None, stage_kinds(recipe, False))
    add(sessions, queue, shape, job_id, "quantize", "quant:fp8-dynamic", costs["quantize"].weight, 9.0)  # not w8a8's
    priced = client.post("/v1/estimates", json=body, headers=auth).json()
    assert priced["stages"]["quantize"] == {
        "seconds": 90.0,
        "low": 90.0,
        "high": 90.0,
        "measured": True,
        "kind": "quant:w8a8",
    }
    high = sum(s["high"] for s in priced["stages"].values()) * FLOOR  # the job's range counts the stage
    assert abs(priced["seconds"][1] - high) <= 0.2
    assert "quantize" not in client.post("/v1/estimates", json=GGUF, headers=auth).json()["stages"]
