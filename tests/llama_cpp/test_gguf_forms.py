"""Form outputs through llama.cpp: each written by saving_forms.write_form, exported by `nbl export --format gguf
--type f32`, and decoded greedily by llama-cpp-python: 3 prompts x 16 tokens identical to the compressed model in
memory (form_layers.apply_form, fp32).

    fold block   a tiny model of every family whose entry names a llama.cpp architecture (nbl/families.py
                 `gguf`: Llama, Mistral, Qwen3, Phi-3, Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE; layers 1, 2 as one
                 fold run, and 4): the base's own GGUF arch, experts and shared expert included
    SmolLM2      fold block k=2 (llama), fold attn k=4 and linear attn k=4 (deci)

Each tiny model has SmolLM2's vocabulary and the config values llama.cpp's graph assumes (the entry's `gguf_fixed`:
Qwen3-MoE's normalized top-k weights, OLMoE's as many k/v heads as queries, as the real models have).

Qwen2 is not here (its entry says llama.cpp is untested): llama.cpp's converter names the pre-tokenizer by hashing
the ids of a fixed text, and only a real Qwen vocabulary hashes to one it knows. None is on this machine (no Hub),
and transformers 5 loads any tokenizer beside a qwen2 config as Qwen2Tokenizer (Qwen's pre-tokenizer; it is in
MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS, qwen3 and the MoE families are not), so SmolLM2's vocabulary under a
Qwen2 config is refused ("BPE pre-tokenizer was not recognized"). Its fold output is the stock class, tested in
transformers (tests/worker/engine/forms/test_forms_outputs.py) and vLLM (tests/serving/test_vllm_forms.py).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gguf_helpers import REPO, greedy, llama_cpp_greedy
from testkit.models import DATA_DIR, load_smollm2, save_tiny_checkpoint, tiny_config

from nbl.families import FAMILIES
from nbl.outputs.forms import FOLD_BLOCK_FAMILIES
from nbl.outputs.gguf_assumed import resolved

pytestmark = pytest.mark.slow

TEXTS = ["The capital of France is", "def fibonacci(n):\n    ", "Once upon a time, in a small village,"]
NEW = 16
# the families whose fold block output is their own class and whose entry names a llama.cpp architecture
FOLD_GGUF = [f for f in FOLD_BLOCK_FAMILIES if FAMILIES[f].gguf and "llama.cpp" not in FAMILIES[f].untested]


@pytest.fixture(scope="module")
def smollm2(smollm2_home):
    return load_smollm2(smollm2_home)


def export_f32(out: Path, gguf_python: Path, tmp: Path) -> dict:
    env = {**os.environ, "NBL_HOME": str(tmp / "home"), "NBL_GGUF_PYTHON": str(gguf_python)}
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
            str(tmp / f"{out.name}.gguf"),
            "--json",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check(model, out: Path, tokenizer, arch: str, gguf_python: Path, tmp: Path) -> None:
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    done = export_f32(out, gguf_python, tmp)
    got = llama_cpp_greedy(gguf_python, Path(done["path"]), ids, TEXTS, NEW, tmp)
    assert done["arch"] == arch and got["arch"] == arch
    assert got["ids"] == ids  # the tokenizer is embedded
    assert got["tokens"] == greedy(model, ids, NEW)


@pytest.mark.parametrize("family", FOLD_GGUF)
def test_tiny_fold_block_is_token_identical_in_llama_cpp(family, smollm2, gguf_python, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from worker.engine.calibration.calibrate import calibrate
    from worker.engine.forms.fold_runs import fit_form_maps
    from worker.engine.forms.form_layers import apply_form
    from worker.engine.forms.saving_forms import write_form
    from worker.engine.forms.surgery import Plan

    # random weights, SmolLM2's tokenizer (llama.cpp's converter reads only tokenizers it knows)
    # with the values llama.cpp's graph assumes (its entry's gguf_fixed: Qwen3-MoE's norm_topk_prob, as the real ones)
    fixed = {key: resolved(value, tiny_config(family).to_dict()) for key, value, _, _ in FAMILIES[family].gguf_fixed}
    base = save_tiny_checkpoint(
        tmp_path / "base", family, seed=7, layers=6, intermediate_size=256, vocab=49152, **fixed
    )
    for f in base.glob("tokenizer*"):
        f.unlink()
    smollm2.tokenizer.save_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    blocks = torch.randint(3, 49152, (8, 24), generator=torch.Generator().manual_seed(0))
    cal = calibrate(model, blocks, batch_size=4, progress=False, modes=("block",), form="fold", max_run=3)
    plan = Plan("block", "nbl", (1, 2, 4), "fold")
    maps = fit_form_maps(cal.stats.__getitem__, "fold", "block", plan.layers)
    out = write_form(base, plan, maps, torch.float32, smollm2.tokenizer, tmp_path / "out", family, {"layers": []})
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 3
    apply_form(model, plan, maps)
    check(model, out, smollm2.tokenizer, FAMILIES[family].gguf, gguf_python, tmp_path)


@pytest.mark.parametrize(
    "form,mode,k,arch", [("fold", "block", 2, "llama"), ("fold", "attn", 4, "deci"), ("linear", "attn", 4, "deci")]
)
def test_smollm2_form_is_token_identical_in_llama_cpp(form, mode, k, arch, smollm2, gguf_python, tmp_path):
    import torch

    from worker.engine.calibration.data import DatasetSpec
    from worker.engine.calibration.stage import calibration_stage
    from worker.engine.config import CompressConfig
    from worker.engine.forms.fold_runs import fit_form_maps
    from worker.engine.forms.form_layers import apply_form
    from worker.engine.forms.saving_forms import write_form
    from worker.engine.forms.surgery import Plan
    from worker.engine.scoring.stage import layer_reader
    from worker.engine.selection.criteria import choose

    lm = smollm2
    cfg = CompressConfig(
        model="smollm2",
        dataset=DatasetSpec("c4"),
        ks=[k],
        num_samples=8,
        seq_len=128,
        mode=mode,
        form=form,
        stats_dir=tmp_path / "stats",
        data_dir=DATA_DIR,
    )
    cal = calibration_stage(cfg, lm, progress=False)
    plan = Plan(mode, "nbl", tuple(choose(cal.scores, mode, "cosine", k)), form)
    maps = fit_form_maps(layer_reader(cal.stats)[1], form, mode, plan.layers)
    cal.cleanup()
    out = write_form(lm.path, plan, maps, torch.float32, lm.tokenizer, tmp_path / "out", lm.family, {"layers": []})
    model = copy.deepcopy(lm.model).eval()
    apply_form(model, plan, maps)
    check(model, out, lm.tokenizer, arch, gguf_python, tmp_path)
