"""A config.json is user input: a Hub repo's, a `local:NAME`'s. Out-of-bounds numbers, and JSON nested past the
parser's depth, are a quick 422 naming the field from POST /v1/estimates and POST /v1/jobs (on Postgres),
never a pinned CPU (issue 24 §1: 10**12 layers looped), a 500 (§5: 10**300 overflowed, deep nesting raised
RecursionError) or a 200 with absurd figures (10**18 layers); the worker's own check refuses them too."""

from __future__ import annotations

import json

import httpx
import pytest
from sqlalchemy import select
from testkit.model_configs import LLAMA_8B, hub_serving, write_config
from testkit.service_lib import assert_problem

from nbl.selection.rise_error import tokens_needed
from service.api import create_app
from service.core.models import Job
from service.estimates import placement

BODY = {"calibration": {"num_samples": 8, "seq_len": 32}, "compression": {"k": 1}}
AUTO_GREEDY = {
    **BODY,
    "compression": {"k": "auto", "criterion": "greedy", "budget": {"max_ppl_increase": 0.1}},
    "selection": {"dataset": "wikitext2", "num_samples": -(-tokens_needed(0.1) // 31)},
}  # enough to resolve it
ANSWER_S = 60  # generous: the answer takes milliseconds; before the fix it never came
HOSTILE = [
    ("num_hidden_layers", 10**12),
    ("num_hidden_layers", 10**18),
    ("num_hidden_layers", 10**300),
    ("num_hidden_layers", 4097),
    ("num_hidden_layers", True),
    ("hidden_size", 65537),
    ("vocab_size", 2**22 + 1),
    ("max_position_embeddings", 2**24 + 1),
    ("intermediate_size", 2**20 + 1),
    ("num_attention_heads", 16385),
    ("num_key_value_heads", 64),
    ("head_dim", 16385),
]


@pytest.fixture
def db_url(pg_url):
    """These tests run on Postgres only."""
    return pg_url


@pytest.fixture
def hub(settings, monkeypatch):
    """serve(repo -> config) -> the Hub stand-in's URL, as the settings' HF_ENDPOINT; the API's memory of an unreachable Hub
    (left by an earlier test) is cleared so that POST /v1/jobs fetches the config."""
    monkeypatch.setattr(placement, "_hub_down_until", 0.0)
    served = {}
    with hub_serving(served) as url:
        monkeypatch.setattr(settings, "hf_read_endpoint", url)

        def serve(repo: str, config) -> str:
            served[repo] = config if isinstance(config, bytes) else json.dumps(config).encode()
            return repo

        yield serve


def test_a_trillion_layers_greedy_k_auto_is_a_quick_422(settings, auth, hub, live_server, sessions):
    """Through a real uvicorn server: the request that looped over 10**12 layers gets its 422 at once."""
    base = live_server(create_app(settings))
    body = {**AUTO_GREEDY, "model": {"id": hub("org/trillion", {**LLAMA_8B, "num_hidden_layers": 10**12})}}
    for path in ("/v1/estimates", "/v1/jobs"):
        try:
            resp = httpx.post(base + path, json=body, headers=auth, timeout=ANSWER_S)
        except httpx.TimeoutException:
            pytest.fail(f"POST {path} did not answer within {ANSWER_S} s")
        p = assert_problem(resp, 422, "validation-error")
        assert "num_hidden_layers must be at most 4,096, got 1000000000000" in p["detail"], p
        assert p["errors"][0]["loc"] == ["body", "model", "id"]
    with sessions() as s:
        assert s.scalars(select(Job)).all() == []


@pytest.mark.parametrize("field,value", HOSTILE, ids=[f"{f}={str(v)[:12]}" for f, v in HOSTILE])
def test_out_of_bounds_shapes_are_a_422_naming_the_field(settings, client, auth, hub, sessions, field, value):
    config = {**LLAMA_8B, field: value}
    write_config(settings.models_dir / "bad", config)
    for model in ("local:bad", hub("org/bad", config)):
        for path in ("/v1/estimates", "/v1/jobs"):
            # k=1 by cca: no set count, so that before the fix this answered (200, 500) instead of hanging
            p = assert_problem(
                client.post(path, json={**BODY, "model": {"id": model}}, headers=auth), 422, "validation-error"
            )
            assert f"config.json: {field} " in p["detail"] and " must be " in p["detail"], (model, path, p)
            assert p["errors"][0]["loc"] == ["body", "model", "id"] and field in p["errors"][0]["msg"]
    with sessions() as s:
        assert s.scalars(select(Job)).all() == []


# A llama's config.json with a text_config: transformers' LlamaConfig takes the top level's numbers, the estimate
# took text_config's, so a bound on text_config alone let 10**12 layers by (low finding 5). Both are bounded.
TWO_LEVELS = [
    (
        {**LLAMA_8B, "num_hidden_layers": 10**12, "text_config": {**LLAMA_8B, "num_hidden_layers": 30}},
        "config.json: num_hidden_layers must be at most 4,096, got 1000000000000",
    ),
    (
        {**LLAMA_8B, "text_config": {**LLAMA_8B, "vocab_size": 2**22 + 1}},
        "config.json: text_config.vocab_size must be at most 4,194,304",
    ),
]


@pytest.mark.parametrize("config,says", TWO_LEVELS, ids=["top-level", "text_config"])
def test_the_top_level_and_text_config_are_both_bounded(settings, client, auth, hub, sessions, tmp_path, config, says):
    from worker import preflight
    from worker.engine.loading.load import ModelError
    from worker.engine.loading.model_rules import check_config

    write_config(settings.models_dir / "two", config)
    for model in ("local:two", hub("org/two", config)):
        for path in ("/v1/estimates", "/v1/jobs"):
            p = assert_problem(
                client.post(path, json={**BODY, "model": {"id": model}}, headers=auth), 422, "validation-error"
            )
            assert says in p["detail"] and p["errors"][0]["loc"] == ["body", "model", "id"], (model, path, p)
    with sessions() as s:
        assert s.scalars(select(Job)).all() == []
    with pytest.raises(ModelError, match=says):  # the worker's preflight, before any download
        preflight.check("local:two", str(write_config(tmp_path / "two", config)), None, [1], 32)
    with pytest.raises(ModelError, match=says):  # the engine's model rules (a GGUF's converted config too)
        check_config(config, "two")


def test_the_bounds_themselves_are_accepted(settings, client, auth):
    edge = {**LLAMA_8B, "num_hidden_layers": 4096, "vocab_size": 2**22, "max_position_embeddings": 2**24}
    write_config(settings.models_dir / "edge", edge)
    resp = client.post("/v1/estimates", json={**BODY, "model": {"id": "local:edge"}}, headers=auth)
    assert resp.status_code == 200, resp.text
    lo, hi = resp.json()["seconds"]
    assert 0 < lo <= hi


def test_a_config_nested_past_the_parsers_depth_is_a_422(settings, client, auth, hub):
    deep = b'{"hidden_size": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"  # 200 kB, under the 1 MB cap
    (settings.models_dir / "deep").mkdir(parents=True)
    (settings.models_dir / "deep" / "config.json").write_bytes(deep)
    for model, says in (("local:deep", "nested too deep"), (hub("org/deep", deep), "nests too deep")):
        for path in ("/v1/estimates", "/v1/jobs"):
            p = assert_problem(
                client.post(path, json={**BODY, "model": {"id": model}}, headers=auth), 422, "validation-error"
            )
            assert says in p["detail"] and p["errors"][0]["loc"] == ["body", "model", "id"], (model, path, p)


def test_the_workers_check_refuses_them_before_any_download(tmp_path):
    """worker/preflight.check runs config_problems on every job and every `nbl compress` (a local directory
    here; a Hub model's config.json is read the same way)."""
    from worker import preflight
    from worker.engine.loading.load import ModelError

    model = write_config(tmp_path / "m", {**LLAMA_8B, "num_hidden_layers": 10**12})
    with pytest.raises(ModelError, match="num_hidden_layers must be at most 4,096"):
        preflight.check("local:m", str(model), None, [1], 32)
    (model / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ModelError, match="no readable config.json"):
        preflight.check("local:m", str(model), None, [1], 32)


def test_a_gguf_whose_metadata_is_out_of_bounds_is_refused_before_it_is_built(tmp_path):
    """A GGUF's metadata becomes the config (worker/engine/loading/gguf.py): 4e9 blocks (the most a u32 holds) are
    refused by the engine's model rules before transformers builds a layer, or reads a tokenizer."""
    import gguf
    import numpy as np

    from worker.engine.loading.gguf import convert_gguf
    from worker.engine.loading.load import ModelError

    writer = gguf.GGUFWriter(tmp_path / "bad.gguf", "llama")
    for add, value in (
        (writer.add_block_count, 4_000_000_000),
        (writer.add_embedding_length, 64),
        (writer.add_feed_forward_length, 128),
        (writer.add_head_count, 4),
        (writer.add_head_count_kv, 2),
        (writer.add_context_length, 256),
        (writer.add_vocab_size, 128),
    ):
        add(value)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tensor("token_embd.weight", np.zeros((128, 64), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelError, match="num_hidden_layers must be at most 4,096, got 4000000000"):
        convert_gguf(tmp_path / "bad.gguf", tmp_path / "converted")
    assert not (tmp_path / "converted").exists()
