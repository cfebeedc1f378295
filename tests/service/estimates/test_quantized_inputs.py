"""A quantized checkpoint (gpt-oss's MXFP4 experts, GPTQ, FP8, ...) is refused at submit, in POST /v1/estimates and
by the worker before any weight is read, with one line that says what to submit instead. The engine reads each
layer's tensors as stored: packed blocks and their scales are not the weights (nbl/model/checks.quantized_error)."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select
from testkit.models import save_tiny_checkpoint
from testkit.service_lib import assert_problem, sqla_broker_messages

from nbl.model.checks import config_problems, quantized_error
from service.core.models import Job
from worker import preflight
from worker.engine.loading.load import ModelError

MXFP4 = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]}
CASES = [  # (family, where the quantization_config sits, its value, the words)
    ("gpt_oss", "", MXFP4, "quant_method 'mxfp4'"),
    ("llama", "", {"quant_method": "gptq", "bits": 4}, "quant_method 'gptq'"),
    ("qwen3", "", "fp8", "quant_method unnamed"),
]


@pytest.fixture
def db_url(sqlite_clean_url):
    return sqlite_clean_url


@pytest.mark.parametrize("family, where, quant, words", CASES)
def test_a_quantized_checkpoint_is_a_422_and_the_worker_refuses_it_too(
    settings, client, auth, sessions, family, where, quant, words
):
    model = save_tiny_checkpoint(settings.models_dir / "m", family)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "quantization_config": quant}))
    body = {"model": {"id": "local:m"}, "calibration": {"num_samples": 8, "seq_len": 32}, "compression": {"k": 1}}
    for path in ("/v1/jobs", "/v1/estimates"):
        p = assert_problem(client.post(path, json=body, headers=auth), 422, "validation-error")
        assert p["errors"][0]["loc"] == ["body", "model", "id"], p
        msg = p["errors"][0]["msg"]
        assert words in msg and "submit the unquantized checkpoint" in msg and "\n" not in msg, msg
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 0
    assert sqla_broker_messages(settings) == []
    with pytest.raises(ModelError, match="the checkpoint is quantized"):
        preflight.check("local:m", str(model), None, [1], 32)
    # the same checkpoint unquantized goes through
    (model / "config.json").write_text(json.dumps(config))
    assert client.post("/v1/jobs", json=body, headers=auth).status_code == 201


def test_a_multimodal_configs_text_part_is_read_too():
    config = {"model_type": "llama", "text_config": {"quantization_config": {"quant_method": "awq"}}}
    assert "text_config.quantization_config, quant_method 'awq'" in quantized_error(config)
    assert quantized_error({"model_type": "llama", "text_config": {}}) is None
    huge = {"model_type": "llama", "quantization_config": {"quant_method": "x" * 10**6}}
    assert len(quantized_error(huge)) < 400  # a config is user input: no megabyte message
    assert [loc for loc, _ in config_problems(huge, [1], 32)] == [("model", "id")]
