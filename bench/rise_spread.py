"""The spread prior of nbl/selection/rise_error.py on SmolLM2-135M: for the cosine ranking's first k layers (Attn NBL, maps
from the cached C4 --num-samples x --seq-len sums), the paired per-token spread s of the selection loss
differences over log(1 + rise), on WikiText-2 validation (--selection-samples blocks of --seq-len).

    .venv/bin/python bench/rise_spread.py [--num-samples 64] [--seq-len 128] [--selection-samples 16] [--ks 1,2,4,6,8]

Written to bench/results/rise_spread.json (and printed).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from engine_cpu import smollm2_gguf  # noqa: E402

from nbl.selection.rise_error import paired  # noqa: E402
from service.core.settings import Settings  # noqa: E402
from worker.engine.calibration.data import DatasetSpec  # noqa: E402
from worker.engine.calibration.stage import calibration_stage, layer_source  # noqa: E402
from worker.engine.config import CompressConfig  # noqa: E402
from worker.engine.loading.load import load_model  # noqa: E402
from worker.engine.scoring.stage import fit_maps, score_stage  # noqa: E402
from worker.engine.selection.criteria import choose  # noqa: E402
from worker.engine.selection.set_loss import SetLoss  # noqa: E402
from worker.engine.selection.stage import selection_data  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-samples", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--selection-samples", type=int, default=16)
    ap.add_argument("--ks", default="1,2,4,6,8")
    args = ap.parse_args()
    os.environ.setdefault("NBL_DATA_DIR", str(HERE.parent.parent / "shared" / "data"))
    settings = Settings()
    lm = load_model(smollm2_gguf(), dtype="float32", device="cpu", models_dir=settings.models_dir, home=settings.home)
    cfg = CompressConfig(
        model="smollm2",
        dataset=DatasetSpec("c4"),
        ks=[4],
        num_samples=args.num_samples,
        seq_len=args.seq_len,
        stats_dir=settings.stats_dir,
        data_dir=settings.data_dir,
        batch_size=8,
        selection=DatasetSpec("wikitext2", split="validation"),
        selection_samples=args.selection_samples,
    )
    cal = calibration_stage(cfg, lm)
    scores = cal.scores or score_stage(cal.stats)
    blocks, _, split = selection_data(cfg, lm, cal)
    sl = SetLoss(layer_source(lm), blocks, "attn", "nbl", lambda i: fit_maps(cal.stats, "attn", [i], split=split)[i])
    base = sl.per_block(()).tolist()
    rows = []
    for k in map(int, args.ks.split(",")):
        layers = choose(scores, "attn", "cosine", k)
        e = paired(base, sl.per_block(tuple(layers)).tolist(), blocks.shape[1] - 1)
        e.update(k=k, layers=layers, ratio=e["sd_per_token"] / math.log1p(e["rise"]) if e["rise"] > 0 else None)
        rows.append(e)
        print(e, flush=True)
    out = {
        "command": " ".join(["python", *sys.argv]),
        "calibration": f"c4 {args.num_samples}x{args.seq_len}",
        "selection": f"wikitext2 validation {args.selection_samples}x{args.seq_len}",
        "criterion": "cosine",
        "rows": rows,
    }
    (HERE / "results" / "rise_spread.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
