"""Make the nbl-form outputs of one family's tiny random model, and their transformers reference (project's venv).

    python tests/serving/families_prepare.py WORKDIR FAMILY   ->  WORKDIR/{base,attn,block}/, WORKDIR/reference.json

One tiny checkpoint of the family (its tests' config, FAMILY_CONFIGS, in the shape vLLM's CPU attention takes:
head_dim 32) compressed by `nbl compress` in attn and block mode (plan.FAMILY_MODES), method nbl. Reference: 16 greedy
fp32 tokens per prompt through the output's own modeling_nbl.py, as prepare.py's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parent), str(HERE)]  # the checkout first, as prepare.py

from plan import FAMILY_MODES  # noqa: E402
from prepare import TINY_PROMPTS, TINY_SHAPE, compress, reference  # noqa: E402
from testkit.models import DATA_DIR, save_tiny_checkpoint  # noqa: E402

# Beyond the tests' tiny config. Gemma 3's has 4 sliding layers (its pattern puts the global one 6th): both kinds
# here, so that a replaced layer of each kind is served with the others keeping their own window. vLLM's Gemma 2
# always ties its LM head to the embeddings (gemma2.py: no lm_head), as every Gemma 2 checkpoint does.
OVERRIDES = {
    "gemma3_text": {"layer_types": ["sliding_attention", "full_attention"] * 2},
    "gemma2": {"tie_word_embeddings": True},
}


def main(work: Path, family: str) -> None:
    work.mkdir(parents=True, exist_ok=True)
    calib = work / "calib.jsonl"
    docs = json.loads((DATA_DIR / "c4" / "c4_demo.json").read_text())[:40]
    calib.write_text("".join(json.dumps({"text": d["text"]}) + "\n" for d in docs))
    base = save_tiny_checkpoint(work / "base", family, seed=1, **TINY_SHAPE, **OVERRIDES.get(family, {}))
    ref = {}
    for mode, k in FAMILY_MODES.items():
        path = compress(
            base,
            work / mode,
            *("--dataset", calib, "--num-samples", 8, "--seq-len", 64),
            *("--mode", mode, "--method", "nbl", "--criterion", "cca", "--k", k),
        )[k]
        ref[mode] = reference(path, TINY_PROMPTS)
        kinds = set(json.loads((path / "config.json").read_text()).get("layer_types") or ["full_attention"])
        ref[mode]["hybrid"] = len(kinds) > 1  # sliding and full layers: vLLM caches each kind in its own group
    (work / "reference.json").write_text(json.dumps(ref, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
