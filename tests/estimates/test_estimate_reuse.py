"""The estimate knows what the worker class holds (service/estimates/reuse.py): a base evaluation its
workers noted in class_caches is not priced (only the outputs' evaluation), a model on its disk is a warm
load priced at the class's warm loads (a cold one, a download, at its cold loads'). Against the real
database, rows as a worker writes them (worker/rates.py, worker/caches.py)."""

from __future__ import annotations

from configs import TINY, write_config

from nbl.recipe import from_request
from nbl.request import JobCreate
from nbl.sizing.rates import shape_key
from nbl.sizing.reuse import BASE_EVALUATION, MODEL, base_evaluation_key, model_key
from nbl.sizing.stage_plan import plan
from service.core.class_cache import ClassCache
from service.core.models import utcnow
from service.core.stage_rate import StageRate
from service.estimates.reuse import reuse

JOB = {"model": {"id": "local:tiny"}, "calibration": {"num_samples": 8, "seq_len": 32},
       "compression": {"k": 1}, "evaluation": {"perplexity": ["wikitext2"], "max_tokens": 512}}


def rows(sessions, queue, shape, job_id, **stages):
    """stages: name=(token-layers, seconds, warm)"""
    with sessions() as s:
        s.add_all(StageRate(job_id=job_id, worker_class=queue, shape=shape, stage=stage, weight=w, seconds=sec,
                            warm=warm, created_at=utcnow()) for stage, (w, sec, warm) in stages.items())
        s.commit()


def test_a_cached_base_is_not_priced_and_a_warm_load_at_the_warm_rate(settings, client, auth, sessions):
    write_config(settings.models_dir / "tiny", TINY)
    job = client.post("/v1/jobs", json=JOB, headers=auth).json()  # a job to hang the rows on
    est = job["estimate"]
    queue, recipe = est["worker_class"], from_request(JobCreate.model_validate(JOB))
    weights = plan(recipe, TINY["num_hidden_layers"])
    rows(sessions, queue, shape_key(est["shape"]), job["id"],
         load=(weights["load"].weight, 100.0, False),  # a download
         calibrate=(weights["calibrate"].weight, 10.0, None), evaluate=(weights["evaluate"].weight, 8.0, None))
    first = client.post("/v1/estimates", json=JOB, headers=auth).json()
    assert first["basis"] == "measured" and first["base_evaluation_cached"] is False and first["warm_load"] is True
    load = first["stages"]["load"]  # no warm load measured: the class's rate over its other stages
    assert load["measured"] is False and load["warm"] is True and load["seconds"] < 10  # not the 100 s download
    assert first["stages"]["evaluate"]["seconds"] == 8.0 and first["stages"]["evaluate"]["base_cached"] is False
    rows(sessions, queue, shape_key(est["shape"]), job["id"], load=(weights["load"].weight, 2.0, True))
    with sessions() as s:
        s.add(ClassCache(worker_class=queue, kind=BASE_EVALUATION, key=base_evaluation_key(recipe), job_id=job["id"],
                         created_at=utcnow()))
        s.commit()
    second = client.post("/v1/estimates", json=JOB, headers=auth).json()
    assert second["stages"]["load"] == {"seconds": 2.0, "measured": True, "warm": True}
    assert second["base_evaluation_cached"] is True and second["stages"]["evaluate"]["base_cached"] is True
    assert second["stages"]["evaluate"]["seconds"] == 4.0  # one model of two: the output alone
    assert second["stages"]["calibrate"] == first["stages"]["calibrate"]
    other = {**JOB, "evaluation": {"perplexity": ["wikitext2"], "max_tokens": 256}}  # another evaluation: not held
    assert client.post("/v1/estimates", json=other, headers=auth).json()["base_evaluation_cached"] is False


def test_a_hub_model_is_warm_once_the_class_loaded_it(sessions, settings):
    recipe = from_request(JobCreate.model_validate({**JOB, "model": {"id": "org/model", "revision": "v1"}}))
    with sessions() as s:
        assert reuse(s, "nbl-cpu", recipe) == (False, False)
        s.add(ClassCache(worker_class="nbl-cpu", kind=MODEL, key=model_key(recipe), created_at=utcnow()))
        s.commit()
        assert reuse(s, "nbl-cpu", recipe) == (True, False) and reuse(s, "nbl-gpu", recipe) == (False, False)
        other = from_request(JobCreate.model_validate({**JOB, "model": {"id": "org/model", "revision": "v2"}}))
        assert reuse(s, "nbl-cpu", other) == (False, False)
