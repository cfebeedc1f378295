"""Issue 35, finding 7: a form the model cannot be written in was refused by the worker after a 201. It is a 422 at
submit naming compression.form whenever the API has the model's config.json (a `local:NAME`'s, a Hub model's it
could fetch), by the rule the worker applies before any download and again before calibrating
(nbl/forms.family_error, through nbl/model_checks.config_problems)."""

from __future__ import annotations

import json

import pytest
import transformers
from sqlalchemy import func, select
from testkit.model_configs import hub_serving
from testkit.service_lib import TINY_CONFIG, assert_problem, sqla_broker_messages

from nbl.outputs.forms import family_error
from service.core.models import Job
from service.estimates import placement
from worker import preflight
from worker.engine.loading.load import ModelError

QWEN2 = {**TINY_CONFIG, "model_type": "qwen2", "intermediate_size": 256}
LLAMA = TINY_CONFIG  # intermediate_size 128: DeciLM's MLP width is a multiple of 256
JOB = {"calibration": {"num_samples": 8, "seq_len": 32}}
CASES = [  # (config, form, mode, the reason's words)
    (QWEN2, "linear", "attn", "it cannot express a qwen2 model"),
    (LLAMA, "fold", "attn", "intermediate_size 128 is not a multiple"),
]


@pytest.fixture
def db_url(sqlite_clean_url):
    return sqlite_clean_url


def job(model: str, form: str, mode: str) -> dict:
    return {**JOB, "model": {"id": model}, "compression": {"k": 1, "form": form, "mode": mode, "criterion": "nmse"}}


def refused(client, auth, path, body, words) -> str:
    p = assert_problem(client.post(path, json=body, headers=auth), 422, "validation-error")
    assert p["errors"][0]["loc"] == ["body", "compression", "form"] and words in p["errors"][0]["msg"], p
    return p["errors"][0]["msg"]


@pytest.mark.parametrize("config, form, mode, words", CASES)
def test_a_form_the_local_model_cannot_take_is_a_422_at_submit(
    settings, client, auth, sessions, tmp_path, config, form, mode, words
):
    (settings.models_dir / "m").mkdir(parents=True)
    (settings.models_dir / "m" / "config.json").write_text(json.dumps(config))
    msg = refused(client, auth, "/v1/jobs", job("local:m", form, mode), words)
    assert refused(client, auth, "/v1/estimates", job("local:m", form, mode), words) == msg
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 0
    assert sqla_broker_messages(settings) == []
    # the worker's words, from the same rule, before any weight is read
    with pytest.raises(ModelError) as worker:
        preflight.check("local:m", str(settings.models_dir / "m"), None, [1], 32, form=form, mode=mode)
    assert str(worker.value) == f"local:m: compression.form: {msg}"
    # the form the model can take goes through
    assert client.post("/v1/jobs", json=job("local:m", "nbl", mode), headers=auth).status_code == 201


@pytest.mark.parametrize("config, form, mode, words", CASES)
def test_a_hub_model_whose_config_the_api_has_is_refused_at_submit(
    settings, client, auth, monkeypatch, config, form, mode, words
):
    monkeypatch.setattr(placement, "_hub_down_until", 0.0)
    with hub_serving({"org/m": json.dumps(config).encode()}) as url:
        monkeypatch.setattr(settings, "hf_read_endpoint", url)
        refused(client, auth, "/v1/jobs", job("org/m", form, mode), words)
        refused(client, auth, "/v1/estimates", job("org/m", form, mode), words)


@pytest.mark.parametrize("window", [4096, None, "absent"])
def test_the_rule_says_the_same_of_the_file_and_of_the_loaded_config(window):
    """The API judges config.json as written, the worker transformers' config of it (whose Mistral fills in
    sliding_window 4096 and use_sliding_window None): one verdict either way."""
    raw = {**TINY_CONFIG, "model_type": "mistral", "intermediate_size": 256, "max_position_embeddings": 8192}
    if window != "absent":
        raw["sliding_window"] = window
    loaded = transformers.AutoConfig.for_model(**raw).to_dict()
    assert family_error("linear", "attn", "mistral", raw) == family_error("linear", "attn", "mistral", loaded)
    assert (family_error("linear", "attn", "mistral", raw) is None) == (window is None)
