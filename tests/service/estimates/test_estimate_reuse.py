"""The estimate knows what the worker class holds (service/estimates/reuse.py): a base evaluation its
workers noted in class_caches is not priced (only the outputs' evaluation), and a model the class has not
loaded adds its fetch (its weights downloaded or hashed the first time: worker/fetch.py) at the bytes per
second the class measured. Against the real database, rows as a worker writes them (worker/rates.py,
worker/host/caches.py)."""

from __future__ import annotations

from testkit.model_configs import TINY, write_config

from nbl.recipe import from_request
from nbl.request import JobCreate
from nbl.sizing.rates import shape_key
from nbl.sizing.reuse import BASE_EVALUATION, MODEL, base_evaluation_key, model_key
from nbl.sizing.stage_plan import plan
from service.core.class_cache import ClassCache
from service.core.models import utcnow
from service.core.stage_rate import StageRate
from service.estimates.reuse import reuse

JOB = {
    "model": {"id": "local:tiny"},
    "calibration": {"num_samples": 8, "seq_len": 32},
    "compression": {"k": 1},
    "evaluation": {"perplexity": ["wikitext2"], "max_tokens": 512},
}


def rows(sessions, queue, shape, job_id, **stages):
    """stages: name=(work, seconds)"""
    with sessions() as s:
        s.add_all(
            StageRate(
                job_id=job_id, worker_class=queue, shape=shape, stage=stage, weight=w, seconds=sec, created_at=utcnow()
            )
            for stage, (w, sec) in stages.items()
        )
        s.commit()


def note(sessions, queue, kind, key, job_id):
    with sessions() as s:
        s.add(ClassCache(worker_class=queue, kind=kind, key=key, job_id=job_id, created_at=utcnow()))
        s.commit()


def core(stage: dict) -> dict:
    """A stage's figure without its range (low, high) and kind."""
    return {k: v for k, v in stage.items() if k not in ("low", "high", "kind")}


def test_a_cached_base_is_not_priced_and_a_new_model_adds_its_fetch(settings, client, auth, sessions):
    write_config(settings.models_dir / "tiny", TINY)
    job = client.post("/v1/jobs", json=JOB, headers=auth).json()  # a job to hang the rows on
    est = job["estimate"]
    queue, recipe = est["worker_class"], from_request(JobCreate.model_validate(JOB))
    weights = plan(recipe, TINY["num_hidden_layers"])
    rows(
        sessions,
        queue,
        shape_key(est["shape"]),
        job["id"],
        load=(weights["load"].weight, 2.0),
        calibrate=(weights["calibrate"].weight, 10.0),
        evaluate=(weights["evaluate"].weight, 8.0),
        fetch=(1e9, 10.0),
    )  # 100 MB/s
    first = client.post("/v1/estimates", json=JOB, headers=auth).json()
    assert first["basis"] == "measured" and first["base_evaluation_cached"] is False and first["warm_load"] is False
    assert core(first["stages"]["fetch"]) == {"seconds": round(first["disk"]["download"] / 1e8, 1), "measured": True}
    assert core(first["stages"]["load"]) == {"seconds": 2.0, "measured": True, "warm": False}
    assert first["stages"]["evaluate"]["seconds"] == 8.0 and first["stages"]["evaluate"]["base_cached"] is False
    note(sessions, queue, MODEL, model_key(recipe), job["id"])
    note(sessions, queue, BASE_EVALUATION, base_evaluation_key(recipe), job["id"])
    second = client.post("/v1/estimates", json=JOB, headers=auth).json()
    assert "fetch" not in second["stages"] and second["warm_load"] is True  # loaded before: nothing to fetch
    assert core(second["stages"]["load"]) == {"seconds": 2.0, "measured": True, "warm": True}
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


def test_the_first_load_of_a_local_model_fetches_it_and_later_ones_do_not(tmp_path):
    """worker/fetch.py: a local directory is hashed into the digest memo the first time (timed), then warm."""
    from testkit.models import save_tiny_checkpoint

    from worker.engine.loading.fingerprint import dir_digest
    from worker.fetch import fetch

    model, home = save_tiny_checkpoint(tmp_path / "m"), tmp_path / "home"
    first = fetch(str(model), None, False, home, None)
    assert first.warm is False and first.seconds > 0
    assert fetch(str(model), None, False, home, None).warm is True
    assert fetch(str(model), None, False, tmp_path / "other-home", None).warm is False  # another machine's memo
    (model / "model.safetensors").write_bytes((model / "model.safetensors").read_bytes())  # rewritten: new mtime
    assert fetch(str(model), None, False, home, None).warm is False
    assert dir_digest(model, home)  # the memo the loader then reads
