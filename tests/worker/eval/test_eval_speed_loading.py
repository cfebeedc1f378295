"""Speed and size figures, and loading our compressed outputs (and nothing else) with their code."""

import json
import logging

import pytest
import torch
from testkit.models import save_tiny_checkpoint, tiny_model, tiny_tokenizer

from worker.engine.forms import surgery
from worker.engine.forms.saving import save_compressed
from worker.engine.loading.load import ModelError, load_model
from worker.engine.scoring.scores import LinearMap
from worker.eval.compressed import is_compressed_dir, load_for_eval, recorded_base
from worker.eval.kv import cache_of
from worker.eval.speed import (
    base_non_embedding_params,
    count_parameters,
    kv_cache_bytes,
    measure_speed,
)

D, LAYERS, KV_HEADS, HEAD_DIM = 64, 4, 2, 16  # testkit.models.tiny_config

pytestmark = pytest.mark.usefixtures("one_thread")


def compress(model, plan):
    g = torch.Generator().manual_seed(0)
    maps = {i: LinearMap(torch.randn(D, D, generator=g) * 0.01, torch.zeros(D), 0.0) for i in plan.layers}
    surgery.apply(model, plan, maps if plan.method == "nbl" else None)
    return model


@pytest.fixture
def compressed_dir(tmp_path):
    base = save_tiny_checkpoint(tmp_path / "base")
    model = compress(tiny_model(), surgery.Plan("attn", "nbl", (0, 2)))  # layer 0 on purpose
    report = {"base_model": str(base), "base_fingerprint": load_model(str(base)).fingerprint}
    return save_compressed(model, tiny_tokenizer(), tmp_path / "out", "llama", report), model


def test_parameter_counts_by_hand():
    model = tiny_model()  # untied: embed (128 x 64) and lm_head (128 x 64)
    counts = count_parameters(model)
    assert counts["params"] == sum(p.numel() for p in model.parameters())
    assert counts["non_embedding_params"] == counts["params"] - 2 * 128 * D
    tied = tiny_model(tie_word_embeddings=True)
    assert count_parameters(tied)["non_embedding_params"] == count_parameters(tied)["params"] - 128 * D


def test_sparsity_counts_the_removed_attention():
    base = tiny_model()
    model = compress(tiny_model(), surgery.Plan("attn", "nbl", (1, 3)))
    attn = sum(p.numel() for p in base.model.layers[1].self_attn.parameters()) + D  # + LN1 weight
    removed = 2 * (attn - (D * D + D))  # each replaced layer gains W (d x d) and b (d)
    assert base_non_embedding_params(model.config) is None  # in memory, model_type is still llama
    speed = measure_speed(
        model,
        lengths=(8, 16),
        new_tokens=4,
        decode_context=8,
        repeats=1,
        warmup=0,
        base_non_embedding=count_parameters(base)["non_embedding_params"],
    )
    assert speed["base_non_embedding_params"] - speed["non_embedding_params"] == removed
    assert speed["sparsity"] == pytest.approx(removed / count_parameters(base)["non_embedding_params"])


@pytest.mark.parametrize("mode", ["attn", "block"])
def test_kv_bytes_per_token_count_only_layers_with_attention(mode):
    per_layer = 2 * KV_HEADS * HEAD_DIM * 4  # keys + values, float32
    for k in (0, 1, 3):
        model = compress(tiny_model(), surgery.Plan(mode, "nbl", tuple(range(k)))) if k else tiny_model()
        speed = measure_speed(model, lengths=(16,), new_tokens=2, decode_context=8, repeats=1, warmup=0)
        assert speed["kv_cache_bytes_per_token"] == (LAYERS - k) * per_layer
        assert speed["kv_cache_layers"] == LAYERS - k
        assert set(speed["prefill_tokens_per_s"]) == {"16"} and speed["decode_tokens_per_s"] is not None


def test_kv_cache_bytes_reads_the_cache_object():
    model = tiny_model()
    with torch.no_grad():
        cache = cache_of(model(input_ids=torch.zeros(2, 5, dtype=torch.long), use_cache=True))
    assert kv_cache_bytes(cache) == LAYERS * 2 * (2 * KV_HEADS * 5 * HEAD_DIM) * 4


def test_lengths_beyond_the_window_are_skipped():
    speed = measure_speed(
        tiny_model(max_position_embeddings=32), lengths=(16, 64), new_tokens=4, decode_context=16, repeats=1, warmup=0
    )
    assert speed["prefill_tokens_per_s"]["64"] is None and speed["prefill_tokens_per_s"]["16"] is not None


def test_speed_inputs_open_with_the_tokenizers_prefix():
    model, prefills = tiny_model(), []
    model.model.embed_tokens.register_forward_pre_hook(
        lambda _, args: prefills.append(args[0][0].tolist()) if args[0].shape[1] > 1 else None
    )
    speed = dict(lengths=(16,), new_tokens=2, decode_context=8, repeats=1, warmup=0)
    measure_speed(model, **speed, prefix=(0,))
    random = torch.randint(0, 128, (1, 16), generator=torch.Generator().manual_seed(0))[0].tolist()  # the seeded ids
    assert len(prefills) == 3 and all(ids == [0, *random[1 : len(ids)]] for ids in prefills)
    prefills.clear()
    measure_speed(model, **speed)  # a tokenizer adding nothing: the seeded ids as they were
    assert len(prefills) == 3 and all(ids == random[: len(ids)] for ids in prefills) and random[0] != 0


def test_compressed_output_loads_with_its_code_and_gives_the_same_logits(compressed_dir):
    out, model = compressed_dir
    assert is_compressed_dir(out) and not is_compressed_dir(out.parent / "base")
    lm = load_for_eval(str(out))
    assert type(lm.model).__module__ != "worker.engine.modeling.modeling_nbl"  # loaded from the directory's file
    assert lm.fingerprint.startswith("dir:") and lm.family == "llama"
    ids = torch.tensor([[3, 5, 7, 9, 11]])
    with torch.no_grad():
        torch.testing.assert_close(lm.model(input_ids=ids).logits, model(input_ids=ids).logits)
    # the base the output records, and its sparsity rebuilt from the config alone
    source, fingerprint = recorded_base(out)
    assert fingerprint == load_for_eval(source).fingerprint
    assert base_non_embedding_params(lm.model.config) == count_parameters(tiny_model())["non_embedding_params"]


def test_an_edited_modeling_file_is_never_executed(compressed_dir, caplog):
    out, model = compressed_dir
    (out / "modeling_nbl.py").write_text((out / "modeling_nbl.py").read_text() + "\nraise RuntimeError('ran')\n")
    with caplog.at_level(logging.WARNING):
        lm = load_for_eval(str(out))
    assert "differs" in caplog.text
    ids = torch.tensor([[3, 5, 7]])
    with torch.no_grad():
        torch.testing.assert_close(lm.model(input_ids=ids).logits, model(input_ids=ids).logits)


def test_input_models_never_trust_remote_code(tmp_path):
    plain = save_tiny_checkpoint(tmp_path / "plain")
    cfg = json.loads((plain / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "evil.Model"}
    (plain / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match="auto_map"):
        load_for_eval(str(plain))
    # an nbl_ model type without our modeling file is not ours: it goes to load_model, which refuses it
    cfg.pop("auto_map")
    cfg["model_type"] = "nbl_llama"
    (plain / "config.json").write_text(json.dumps(cfg))
    assert not is_compressed_dir(plain)
    with pytest.raises(ModelError):
        load_for_eval(str(plain))
