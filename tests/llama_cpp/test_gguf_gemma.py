"""Gemma through llama.cpp (issue 37): a tiny Gemma 2 and Gemma 3 exported whole by `nbl export --format gguf
--type f32` decode token-exact in llama.cpp, and one with a layer removed is refused, because llama.cpp derives
the sliding/global pattern from the position (llama_hparams::set_swa_pattern) where transformers reads
layer_types (nbl/outputs/gguf_assumed.py). Forced through llama.cpp's converter anyway, that model decodes other
tokens than transformers: the refusal guards a real difference.

The tiny models have 6 layers (Gemma 3: layers 0-4 sliding, 5 global; Gemma 2: even sliding, odd global), an
8-token window that the prompts cross, head_dim 16 with query_pre_attn_scalar 16 (llama.cpp scales by
1/sqrt(head_dim) below the 27B), tied embeddings (llama.cpp's Gemma 2 drops lm_head) and SmolLM2's vocabulary.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gguf_helpers import REPO, llama_cpp_greedy, transformers_greedy
from test_gguf_forms import NEW, TEXTS, export_f32
from testkit.models import load_smollm2, tiny_model

pytestmark = pytest.mark.slow

TINY = dict(layers=6, intermediate_size=256, vocab=49152, query_pre_attn_scalar=16, tie_word_embeddings=True)


@pytest.fixture(scope="module")
def tokenizer(smollm2_home):
    return load_smollm2(smollm2_home).tokenizer


def save(model, tokenizer, path: Path) -> Path:
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def without_layer(model, drop: int):
    """The model with layer `drop` removed, its config's layer_types kept for the layers that remain (as
    worker/engine/forms/kept_layers.py writes them)."""
    from transformers import AutoModelForCausalLM

    config = model.config
    kept = [i for i in range(config.num_hidden_layers) if i != drop]
    small = type(config).from_dict(
        {**config.to_dict(), "num_hidden_layers": len(kept), "layer_types": [config.layer_types[i] for i in kept]}
    )
    out = AutoModelForCausalLM.from_config(small).eval()
    state = model.state_dict()
    for new, old in enumerate(kept):
        prefix = f"model.layers.{old}."
        out.model.layers[new].load_state_dict({k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)})
    rest = {k: v for k, v in state.items() if not k.startswith("model.layers.")}
    assert not out.load_state_dict(rest, strict=False).unexpected_keys
    return out


@pytest.mark.parametrize("family,arch", [("gemma2", "gemma2"), ("gemma3_text", "gemma3")])
def test_tiny_gemma_is_token_identical_in_llama_cpp(family, arch, tokenizer, gguf_python, tmp_path):
    out = save(tiny_model(family, seed=7, **TINY), tokenizer, tmp_path / "gemma")
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    assert max(len(i) for i in ids) + NEW > 8  # the window matters
    done = export_f32(out, gguf_python, tmp_path)
    got = llama_cpp_greedy(gguf_python, Path(done["path"]), ids, TEXTS, NEW, tmp_path)
    assert done["arch"] == arch and got["arch"] == arch
    assert got["tokens"] == transformers_greedy(out, ids, NEW)


def test_gemma3_with_a_layer_removed_is_refused_and_llama_cpp_would_run_another_model(tokenizer, gguf_python, tmp_path):
    model = without_layer(tiny_model("gemma3_text", seed=7, **TINY), drop=2)
    out = save(model, tokenizer, tmp_path / "gemma")
    types = json.loads((out / "config.json").read_text())["layer_types"]
    assert types == ["sliding_attention"] * 4 + ["full_attention"]  # llama.cpp: 5 layers, all sliding
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "export",
            str(out),
            "--format",
            "gguf",
            "--type",
            "f32",
            "--out",
            str(tmp_path / "x.gguf"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "global attention at layers [4]" in proc.stderr and "set_swa_pattern(6)" in proc.stderr
    # llama.cpp's converter, run directly without our checks: the GGUF computes another model
    gguf = tmp_path / "forced.gguf"
    script = REPO / "integrations" / "gguf" / "export_gguf.py"
    conv = subprocess.run([str(gguf_python), str(script), str(out), str(gguf), "f32"], capture_output=True, text=True)
    assert conv.returncode == 0, conv.stderr[-2000:]
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    got = llama_cpp_greedy(gguf_python, gguf, ids, TEXTS, NEW, tmp_path)
    assert got["tokens"] != transformers_greedy(out, ids, NEW)
