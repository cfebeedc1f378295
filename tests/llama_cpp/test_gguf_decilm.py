"""DeciLM outputs (forms `linear` and `fold` in attn mode: attention replace_with_linear / no_op) exported as
llama.cpp's `deci`, per-layer head counts, f32 greedy token-identical to transformers through the output's
modeling file. The outputs are made by `nbl compress --form`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from gguf_helpers import REPO, llama_cpp_greedy
from testkit.models import save_tiny_checkpoint, smollm2_gguf

pytestmark = pytest.mark.slow

TEXTS = ["The capital of France is", "def fibonacci(n):\n    ", "Once upon a time, in a small village,"]
NEW = 16


def nbl(*args, env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", *map(str, args)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


@pytest.mark.parametrize("form", ["linear", "fold"])
def test_attn_output_exports_as_deci_and_is_token_identical(form, tmp_path, text_file, gguf_python):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from worker.engine.loading.gguf import convert_gguf

    env = {**os.environ, "NBL_HOME": str(tmp_path / "home"), "NBL_GGUF_PYTHON": str(gguf_python)}
    smollm2 = convert_gguf(smollm2_gguf(), tmp_path / "smollm2")
    # llama.cpp's deci writes ffn sizes as multiples of 256 (ffn_mult): 256 = 2 * 6.0 * 64 / 3
    base = save_tiny_checkpoint(tmp_path / "tiny", vocab=49152, intermediate_size=256, layers=4, seed=5)
    for f in base.glob("tokenizer*"):
        f.unlink()
    AutoTokenizer.from_pretrained(smollm2).save_pretrained(base)
    out = tmp_path / "out"
    nbl(
        "compress",
        "--model",
        base,
        "--dataset",
        text_file,
        "--num-samples",
        8,
        "--seq-len",
        64,
        "--k",
        2,
        "--mode",
        "attn",
        "--form",
        form,
        "--criterion",
        "nmse",
        "--out",
        out,
        "--no-load-check",
        env=env,
    )
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["DeciLMForCausalLM"]
    gguf = tmp_path / "out.gguf"
    done = json.loads(
        nbl("export", out, "--format", "gguf", "--type", "f32", "--out", gguf, "--json", env=env)
        .stdout.strip()
        .splitlines()[-1]
    )
    assert done["arch"] == "deci"
    tok = AutoTokenizer.from_pretrained(base)  # the output's config names code: its tokenizer would ask
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    got = llama_cpp_greedy(gguf_python, gguf, ids, TEXTS, NEW, tmp_path)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, trust_remote_code=True).eval()
    reference = []
    with torch.no_grad():
        for prompt in ids:
            seq = torch.tensor([prompt])
            for _ in range(NEW):
                seq = torch.cat([seq, model(seq).logits[:, -1:].argmax(-1)], dim=1)
            reference.append(seq[0, len(prompt) :].tolist())
    assert got["arch"] == "deci" and got["tokens"] == reference
