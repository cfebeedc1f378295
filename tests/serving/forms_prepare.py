"""Make the form outputs the plugin-free vLLM test serves, and their transformers reference (project's venv).

    python tests/serving/forms_prepare.py WORKDIR   ->  WORKDIR/<name>/, WORKDIR/forms_reference.json

Tiny random checkpoints of each family fold writes (vLLM's CPU attention needs head_dim >= 32) and the real
SmolLM2, compressed by `nbl compress --form fold`: block mode (the base's own class, loaded by transformers with
no trust_remote_code) and attn mode (DeciLM, through the shipped modeling_decilm.py). Reference: 16 greedy fp32
tokens per prompt, as prepare.py's.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parent), str(HERE)]  # the checkout first, as prepare.py

from prepare import SMOLLM2_PROMPTS, TINY_PROMPTS, TINY_SHAPE, compress, greedy  # noqa: E402
from testkit.models import DATA_DIR, save_tiny_checkpoint, smollm2_gguf  # noqa: E402

# name -> (family, mode, k); every one form fold
FORM_OUTPUTS = {
    "tiny-llama-fold-block": ("llama", "block", 2),
    "tiny-mistral-fold-block": ("mistral", "block", 2),
    "tiny-qwen2-fold-block": ("qwen2", "block", 2),
    "tiny-qwen3-fold-block": ("qwen3", "block", 2),
    "tiny-phi3-fold-block": ("phi3", "block", 2),
    "tiny-mixtral-fold-block": ("mixtral", "block", 2),
    "tiny-qwen2_moe-fold-block": ("qwen2_moe", "block", 2),
    "tiny-qwen3_moe-fold-block": ("qwen3_moe", "block", 2),
    "tiny-olmoe-fold-block": ("olmoe", "block", 2),
    "tiny-llama-fold-attn": ("llama", "attn", 2),
    "smollm2-fold-block": ("smollm2", "block", 2),
    "smollm2-fold-attn": ("smollm2", "attn", 4),
}


def main(work: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    calib = work / "calib.jsonl"
    docs = json.loads((DATA_DIR / "c4" / "c4_demo.json").read_text())[:40]
    calib.write_text("".join(json.dumps({"text": d["text"]}) + "\n" for d in docs))
    ref = {}
    only = set(os.environ.get("NBL_FORMS_ONLY", "").split(",")) - {""}  # a subset, when debugging one
    for name, (family, mode, k) in FORM_OUTPUTS.items():
        if only and name not in only:
            continue
        if family == "smollm2":
            base, data, prompts = (
                smollm2_gguf(),
                ["--dataset", "c4", "--num-samples", 8, "--seq-len", 128],
                SMOLLM2_PROMPTS,
            )
        else:
            base = save_tiny_checkpoint(
                work / f"base-{family}", family, seed=1, layers=6, intermediate_size=256, **TINY_SHAPE
            )
            data, prompts = ["--dataset", calib, "--num-samples", 8, "--seq-len", 64], TINY_PROMPTS
        path = compress(
            base,
            work / name,
            *data,
            "--mode",
            mode,
            "--form",
            "fold",
            "--criterion",
            "nmse",
            "--k",
            k,
            "--no-load-check",
        )[k]
        remote = mode == "attn"  # DeciLM: our modeling file; fold block: the argument is never passed
        kw = {"trust_remote_code": True} if remote else {}
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kw).eval()
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
        ids = [tok(p).input_ids for p in prompts]
        runs = [greedy(model, i) for i in ids]
        ref[name] = {
            "path": str(path),
            "remote": remote,
            "prompts": ids,
            "tokens": [r[0] for r in runs],
            "logprobs": [r[1] for r in runs],
        }
    (work / "forms_reference.json").write_text(json.dumps(ref, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
