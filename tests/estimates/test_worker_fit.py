"""The worker's own check before any download (worker/preflight.py): a job too large for this worker's
devices fails as `user`, with the numbers; one that fits goes on."""

from __future__ import annotations

import pytest

from configs import HUGE, TINY, write_config
from worker import preflight
from worker.engine.loading import ModelError
from worker.errors import classify

SPEC = {"model": {"id": "local:m"}, "calibration": {"num_samples": 8, "seq_len": 32}, "compression": {"k": 1}}


def fit(config):
    return preflight.fits("local:m", config, SPEC, "cpu", None)


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
    from worker.capacity import host_bytes

    return host_bytes()
