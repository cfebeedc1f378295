"""POST /v1/estimates with an inline `config` (issue 38 item 4): a model that is not on the Hub is sized from
the config.json in the body, as `nbl estimate --model DIR` sizes a directory's, with the same checks as a
fetched config; POST /v1/jobs takes no such key. The Hub is unreachable here: nothing is fetched."""

from __future__ import annotations

from testkit.model_configs import TINY, write_config
from testkit.service_lib import assert_problem

from nbl.sizing.job import as_json
from service.estimates.jobs import place_job

BODY = {
    "model": {"id": "acme/not-on-the-hub"},
    "calibration": {"num_samples": 8, "seq_len": 32},
    "compression": {"k": 1},
}


def test_an_inline_config_is_estimated_without_the_hub(settings, client, auth, monkeypatch):
    monkeypatch.setattr(settings, "hf_read_endpoint", "http://127.0.0.1:1")  # HF_ENDPOINT: unreachable
    assert client.post("/v1/estimates", json=BODY, headers=auth).status_code == 503  # nothing to size it from
    r = client.post("/v1/estimates", json={**BODY, "config": TINY}, headers=auth)
    assert r.status_code == 200, r.text
    est = r.json()
    assert est["shape"]["layers"] == TINY["num_hidden_layers"] and est["shape"]["hidden_size"] == TINY["hidden_size"]
    write_config(settings.models_dir / "tiny", TINY)  # the same config as a local model: the same figures
    local = client.post("/v1/estimates", json={**BODY, "model": {"id": "local:tiny"}}, headers=auth).json()
    for key in ("device_bytes", "host_bytes", "disk_bytes", "seconds", "worker_class", "shape"):
        assert est[key] == local[key], key
    from nbl.recipe import from_request
    from nbl.request import JobCreate

    placed = place_job(TINY, from_request(JobCreate.model_validate(BODY)), settings)
    assert est["seconds"] == as_json(placed.estimate, None)["seconds"]


def test_an_inline_config_is_checked_as_a_fetched_one(settings, client, auth):
    broken = {k: v for k, v in TINY.items() if k != "hidden_size"}
    p = assert_problem(
        client.post("/v1/estimates", json={**BODY, "config": broken}, headers=auth), 422, "validation-error"
    )
    assert p["errors"][0]["loc"] == ["body", "config"]
    too_deep_k = {**BODY, "compression": {"k": TINY["num_hidden_layers"] + 1}, "config": TINY}
    assert_problem(client.post("/v1/estimates", json=too_deep_k, headers=auth), 422, "validation-error")
    huge = {**BODY, "config": {**TINY, "pad": "x" * (1 << 20)}}
    assert client.post("/v1/estimates", json=huge, headers=auth).status_code == 413  # as any body that large
    assert_problem(client.post("/v1/estimates", json={**BODY, "config": [1]}, headers=auth), 422, "validation-error")
    assert_problem(client.post("/v1/jobs", json={**BODY, "config": TINY}, headers=auth), 422, "validation-error")
