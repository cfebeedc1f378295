"""Make the form outputs the plugin-free vLLM test serves, and their transformers reference (project's venv).

    python tests/serving/forms_prepare.py WORKDIR   ->  WORKDIR/<name>/, WORKDIR/forms_reference.json

Tiny random checkpoints (vLLM's CPU attention needs head_dim >= 32) compressed by `nbl compress --form fold`:
block mode (the base's own class, loaded by transformers with no trust_remote_code) and attn mode (DeciLM,
through the shipped modeling_decilm.py). Reference: 16 greedy fp32 tokens per prompt, as prepare.py's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from conftest import DATA_DIR, save_tiny_checkpoint  # noqa: E402  (tests/conftest.py)
from prepare import TINY_PROMPTS, TINY_SHAPE, compress, greedy  # noqa: E402

# name -> (family, mode); every one form fold, k = 2
FORM_OUTPUTS = {"tiny-llama-fold-block": ("llama", "block"), "tiny-qwen2-fold-block": ("qwen2", "block"),
                "tiny-llama-fold-attn": ("llama", "attn")}


def main(work: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    calib = work / "calib.jsonl"
    docs = json.loads((DATA_DIR / "c4" / "c4_demo.json").read_text())[:40]
    calib.write_text("".join(json.dumps({"text": d["text"]}) + "\n" for d in docs))
    ref = {}
    for name, (family, mode) in FORM_OUTPUTS.items():
        base = save_tiny_checkpoint(work / f"base-{family}", family, seed=1, layers=6, intermediate_size=256,
                                    **TINY_SHAPE)
        path = compress(base, work / name, "--dataset", calib, "--num-samples", 8, "--seq-len", 64, "--mode", mode,
                        "--form", "fold", "--criterion", "nmse", "--k", 2, "--no-load-check")[2]
        remote = mode == "attn"  # DeciLM: our modeling file; fold block: the argument is never passed
        kw = {"trust_remote_code": True} if remote else {}
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kw).eval()
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
        ids = [tok(p).input_ids for p in TINY_PROMPTS]
        runs = [greedy(model, i) for i in ids]
        ref[name] = {"path": str(path), "remote": remote, "prompts": ids, "tokens": [r[0] for r in runs],
                     "logprobs": [r[1] for r in runs]}
    (work / "forms_reference.json").write_text(json.dumps(ref, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
