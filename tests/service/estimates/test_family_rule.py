"""Issue 35, finding 11: `nbl estimate` sized a mixtral config (unsupported then) that `nbl compress` refused. The family rule is
one table (nbl/families.py) that the estimate (CLI and POST /v1/estimates, a local or a Hub model) and the
worker's loader both read: an unsupported family is refused by each, with the same reason."""

from __future__ import annotations

import json

import pytest
from testkit.model_configs import TINY, hub_serving, write_config
from testkit.service_lib import assert_problem

from cli.main import main
from nbl.families import FAMILIES
from service.estimates import placement
from worker.engine.loading.model_rules import ModelError, check_config
from worker.engine.modeling import modeling_nbl

# a family this engine does not take (Falcon: parallel attention and MLP, no post-attention norm)
FALCON = {**TINY, "architectures": ["FalconForCausalLM"], "model_type": "falcon"}
JOB = {"calibration": {"num_samples": 8, "seq_len": 32}, "compression": {"k": 1}}


@pytest.fixture
def db_url(sqlite_clean_url):
    return sqlite_clean_url


def worker_reason(config: dict) -> str:
    """What the worker's loader says of this config, without its source prefix."""
    with pytest.raises(ModelError) as e:
        check_config(config, "SRC")
    return str(e.value).removeprefix("SRC: ")


def test_the_shipped_modeling_file_takes_the_families_the_rule_admits():
    assert modeling_nbl.FAMILIES == {f: (e.config, e.model, e.attn) for f, e in FAMILIES.items()}


def test_nbl_estimate_refuses_what_the_worker_refuses(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NBL_HOME", str(tmp_path / "home"))
    model = write_config(tmp_path / "falcon", FALCON)
    code = main(["estimate", "--model", str(model), "--k", "1", "--num-samples", "8", "--seq-len", "32", "--json"])
    out = capsys.readouterr()
    reason = worker_reason(FALCON)
    assert "architecture 'falcon' is not supported" in reason
    assert code == 2 and out.out == "" and out.err.strip() == f"nbl: error: {model}: {reason}", out.err


def test_post_estimates_refuses_a_local_falcon_with_the_workers_reason(settings, client, auth):
    write_config(settings.models_dir / "falcon", FALCON)
    p = assert_problem(
        client.post("/v1/estimates", json={**JOB, "model": {"id": "local:falcon"}}, headers=auth),
        422,
        "validation-error",
    )
    assert p["errors"][0]["loc"] == ["body", "model", "id"] and p["errors"][0]["msg"] == worker_reason(FALCON), p


def test_a_hub_falcon_is_refused_by_the_estimate_and_at_submit(settings, client, auth, sessions, monkeypatch):
    monkeypatch.setattr(placement, "_hub_down_until", 0.0)
    with hub_serving({"org/falcon": json.dumps(FALCON).encode()}) as url:
        monkeypatch.setattr(settings, "hf_read_endpoint", url)
        for path in ("/v1/estimates", "/v1/jobs"):
            p = assert_problem(
                client.post(path, json={**JOB, "model": {"id": "org/falcon"}}, headers=auth), 422, "validation-error"
            )
            assert p["errors"][0]["loc"] == ["body", "model", "id"], p
            assert p["errors"][0]["msg"] == worker_reason(FALCON), p
        # a family the rule admits is sized as before
        write_config(settings.models_dir / "tiny", TINY)
        tiny = client.post("/v1/estimates", json={**JOB, "model": {"id": "local:tiny"}}, headers=auth)
        assert tiny.status_code == 200, tiny.text
