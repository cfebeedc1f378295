"""Gemma 3's multimodal checkpoint: a job compresses its text model (worker/engine/loading/text_part.py). The text
model written out gives the multimodal model's logits on text, exactly; the vision tower, the projector and the
image processor are left out; a sharded checkpoint stays sharded; load_model hands the engine the text family."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from testkit.models import save_tiny_gemma3_multimodal

from nbl.families import family_error, text_model_config
from worker.engine.loading.load import load_model
from worker.engine.loading.text_part import extract_text_part


def names(directory) -> set[str]:
    out = set()
    for f in directory.glob("*.safetensors"):
        with safe_open(str(f), "pt") as st:
            out |= set(st.keys())
    return out


@pytest.mark.parametrize("shard", [None, "20KB"])
def test_the_text_model_gives_the_multimodal_models_logits_on_text(tmp_path, shard):
    from transformers import AutoModelForCausalLM, Gemma3ForConditionalGeneration

    base = save_tiny_gemma3_multimodal(tmp_path / "mm", **({"max_shard_size": shard} if shard else {}))
    out = extract_text_part(base, tmp_path / "text")
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "gemma3_text" and config["architectures"] == ["Gemma3ForCausalLM"]
    assert config["num_hidden_layers"] == 4 and config["layer_types"]  # complete, transformers' defaults filled in
    assert all(n.startswith("model.") for n in names(out)) and not (out / "preprocessor_config.json").exists()
    assert (out / "tokenizer.json").is_file()
    assert (out / "model.safetensors.index.json").is_file() == (shard is not None)
    ids = torch.randint(3, 120, (2, 24))
    with torch.no_grad():
        want = Gemma3ForConditionalGeneration.from_pretrained(base).eval()(input_ids=ids).logits
        got = AutoModelForCausalLM.from_pretrained(out).eval()(input_ids=ids).logits
    assert torch.equal(got, want)
    assert extract_text_part(base, tmp_path / "text") == out  # once: the folder is reused


def test_load_model_gives_the_engine_the_text_family(tmp_path):
    base = save_tiny_gemma3_multimodal(tmp_path / "mm")
    raw = json.loads((base / "config.json").read_text())
    assert raw["model_type"] == "gemma3" and family_error(raw) is None
    assert text_model_config(raw)["model_type"] == "gemma3_text"
    lm = load_model(str(base), weights=False, models_dir=tmp_path / "models")
    assert (lm.family, lm.text_part_of) == ("gemma3_text", "gemma3")
    assert lm.path.parent == tmp_path / "models" and lm.fingerprint.startswith("dir:")
    with pytest.raises(ValueError, match="models_dir"):
        load_model(str(base), weights=False)


def test_a_multimodal_family_whose_text_part_is_not_ours_is_refused():
    config = {"model_type": "gemma3", "text_config": {"model_type": "llava"}}
    assert "architecture 'gemma3' is not supported" in family_error(config)
    assert "gemma3 (its text part)" in family_error({"model_type": "paligemma"})


# google/gemma-3-4b-it's config.json: its text_config holds only what differs from Gemma3TextConfig's defaults
GEMMA3_4B_IT = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "mm_tokens_per_image": 256,
    "text_config": {
        "hidden_size": 2560,
        "intermediate_size": 10240,
        "model_type": "gemma3_text",
        "num_hidden_layers": 34,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 1024,
    },
    "torch_dtype": "bfloat16",
    "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model", "num_hidden_layers": 27},
}


def test_a_hub_configs_sparse_text_config_is_sized_with_the_text_configs_defaults():
    from transformers import Gemma3TextConfig

    from nbl.families import TEXT_PARTS
    from nbl.sizing.shapes import shape_of

    full = Gemma3TextConfig().to_dict()
    assert all(full[k] == v for k, v in TEXT_PARTS["gemma3"].defaults), "the entry's defaults are transformers' own"
    built = Gemma3TextConfig(**GEMMA3_4B_IT["text_config"]).to_dict()
    assert shape_of(GEMMA3_4B_IT) == shape_of({**built, "torch_dtype": "bfloat16"})
    assert round(shape_of(GEMMA3_4B_IT).params / 1e9, 2) == 3.88  # the text model of the 4B: no vision tower
