"""The worker's own check before any download (worker/preflight.py): a job too large for this worker's
devices fails as `user`, with the numbers; one that fits goes on."""

from __future__ import annotations

import pytest
from testkit.model_configs import HUGE, TINY, write_config

from nbl.recipe import from_request
from nbl.request import JobCreate
from worker import preflight
from worker.engine.loading.load import ModelError
from worker.errors import classify

SPEC = {"model": {"id": "local:m"}, "calibration": {"num_samples": 8, "seq_len": 32}, "compression": {"k": 1}}
JOB = JobCreate.model_validate(SPEC)


def fit(config):
    return preflight.fits("local:m", config, from_request(JOB), "cpu", None)


def test_a_job_too_large_for_this_worker_fails_as_user_with_the_numbers(tmp_path):
    model = write_config(tmp_path / "huge", HUGE)
    with pytest.raises(ModelError) as e:
        preflight.check("local:m", str(model), None, [1], 32, fit)
    msg = str(e.value)
    assert msg.startswith("local:m: the job does not fit this worker (cpu): it needs ")
    assert "GB of host memory, this worker has " in msg and str(tmp_path) not in msg
    assert classify(e.value).type == "user"


def test_a_job_that_fits_goes_on(tmp_path):
    model = write_config(tmp_path / "tiny", TINY)
    preflight.check("local:m", str(model), None, [1], 32, fit)
    est = fit(TINY)
    assert est["device_bytes"] == 0 and 0 < est["host_bytes"] < preflight_host()


def preflight_host() -> int:
    from worker.host.capacity import host_bytes

    return host_bytes()


def test_the_pipeline_hands_its_estimate_to_the_sink_before_loading(tmp_path):
    """On the way to the data loader (a `csv` dataset stops it there, after the model's checks)."""
    from testkit.models import save_tiny_checkpoint

    from nbl.recipe import Calibration, Compression, Recipe
    from worker.pipeline import run
    from worker.pipeline_io import Options, Paths
    from worker.publish.local import LocalDir

    class Sink:
        def __init__(self):
            self.calls = []

        def __getattr__(self, name):
            return lambda *args: self.calls.append((name, args))

    model = save_tiny_checkpoint(tmp_path / "tiny")
    recipe = Recipe(
        model=str(model),
        calibration=Calibration(dataset="csv", num_samples=4, seq_len=32),
        compression=Compression(ks=(1,)),
    )
    sink = Sink()
    with pytest.raises(ValueError):
        run(
            recipe,
            sink,
            Paths(work_dir=tmp_path / "work", publish_dir=tmp_path / "pub"),
            LocalDir(tmp_path / "pub", "alpha", "out", "job_x"),
            Options(devices="cpu"),
        )
    names = [name for name, _ in sink.calls]
    assert "estimate" in names and names.index("estimate") < len(names)
    figures = dict(sink.calls)["estimate"][0]
    assert figures["devices"] == ["cpu"] and figures["device_bytes"] == 0 and figures["host_bytes"] > 0


def test_keep_estimate_fills_only_a_missing_one(settings, client, auth, sessions, monkeypatch):
    from service.core.models import Job
    from service.estimates.store import keep_estimate

    monkeypatch.setattr(settings, "hf_read_endpoint", "http://127.0.0.1:1")  # HF_ENDPOINT
    hub = client.post("/v1/jobs", json={"model": {"id": "org/model"}, "compression": {"k": 1}}, headers=auth).json()
    write_config(settings.models_dir / "tiny", TINY)
    local = client.post("/v1/jobs", json={**SPEC, "model": {"id": "local:tiny"}}, headers=auth).json()
    with sessions() as s:
        assert keep_estimate(s, hub["id"], {"host_bytes": 1}) is True
        assert keep_estimate(s, local["id"], {"host_bytes": 1}) is False
        assert s.get(Job, hub["id"]).estimate == {"host_bytes": 1}
        assert s.get(Job, local["id"]).estimate["worker_class"] == "nbl-cpu"
