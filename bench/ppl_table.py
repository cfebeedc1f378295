"""WikiText-2 perplexity of SmolLM2-135M under each NBL / DROP recipe, from one calibration.

    .venv/bin/python bench/ppl_table.py [--num-samples 64] [--seq-len 512] [--max-tokens 32768]

Rows: Attn NBL with the cca, cosine and loss criteria, Attn DROP (cosine, as the DROP paper),
at k = 0, 4, 8, 12; Block NBL against Block DROP at k = 2, 4 (cca for NBL, cosine for DROP).
Writes bench/results/ppl_table.json and .md. Perplexity: non-overlapping 2048-token windows over
the first --max-tokens tokens of the WikiText-2 raw test set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from engine_cpu import smollm2_gguf  # noqa: E402

from service.core.settings import Settings  # noqa: E402
from worker.engine.calibration.data import DatasetSpec  # noqa: E402
from worker.engine.calibration.stage import calibration_stage  # noqa: E402
from worker.engine.config import CompressConfig  # noqa: E402
from worker.engine.forms.surgery import Plan, replaced  # noqa: E402
from worker.engine.loading.load import load_model  # noqa: E402
from worker.engine.scoring.stage import fit_maps, score_stage  # noqa: E402
from worker.engine.selection.criteria import choose  # noqa: E402
from worker.engine.selection.loss_probe import loss_rise  # noqa: E402
from worker.eval.perplexity import corpus_text, perplexity  # noqa: E402

ROWS = [
    ("attn", "nbl", "cca", (4, 8, 12)),
    ("attn", "nbl", "cosine", (4, 8, 12)),
    ("attn", "nbl", "loss", (4, 8, 12)),
    ("attn", "drop", "cosine", (4, 8, 12)),
    ("block", "nbl", "cca", (2, 4)),
    ("block", "drop", "cosine", (2, 4)),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-samples", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=32768)
    ap.add_argument("--window", type=int, default=2048)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "ppl_table")
    args = ap.parse_args()
    os.environ.setdefault("NBL_DATA_DIR", str(HERE.parent.parent / "shared" / "data"))
    settings = Settings()

    t0 = time.perf_counter()
    lm = load_model(smollm2_gguf(), dtype="float32", device="cpu", models_dir=settings.models_dir, home=settings.home)
    cfg = CompressConfig(
        model="smollm2",
        dataset=DatasetSpec("c4"),
        ks=[1],
        num_samples=args.num_samples,
        seq_len=args.seq_len,
        stats_dir=settings.stats_dir,
        data_dir=settings.data_dir,
    )
    cal = calibration_stage(cfg, lm)
    scores = score_stage(cal.stats)
    t_cal = time.perf_counter() - t0
    text = corpus_text("wikitext2", settings.data_dir)

    def ppl() -> dict:
        t = time.perf_counter()
        r = perplexity(lm.model, lm.tokenizer, text, window=args.window, max_tokens=args.max_tokens, progress=False)
        return {**r, "seconds": round(time.perf_counter() - t, 1)}

    results = {"base": ppl()}
    print("base", results["base"], flush=True)
    probe_maps = fit_maps(cal.stats, "attn", range(len(scores)), split="fit")
    t = time.perf_counter()
    for s, r in zip(scores, loss_rise(lm.model, cal.held_blocks, "attn", "nbl", probe_maps, batch_size=4)):
        s["attn"]["loss_rise"] = r
    t_probe = time.perf_counter() - t
    rows = []
    for mode, method, criterion, ks in ROWS:
        for k in ks:
            layers = choose(scores, mode, criterion, k)
            maps = fit_maps(cal.stats, mode, layers) if method == "nbl" else {}
            with replaced(lm.model, Plan(mode, method, tuple(layers)), maps):
                r = ppl()
            rows.append({"mode": mode, "method": method, "criterion": criterion, "k": k, "layers": layers, **r})
            print(rows[-1], flush=True)

    out = {
        "model": "SmolLM2-135M-Instruct",
        "calibration": f"c4_demo {args.num_samples}x{args.seq_len}",
        "eval": f"WikiText-2 raw test, first {args.max_tokens} tokens, window {args.window}",
        "calibration_s": round(t_cal, 1),
        "loss_probe_s": round(t_probe, 1),
        "base": results["base"],
        "rows": rows,
        "scores": scores,
        "command": " ".join(["python", *sys.argv]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(out, indent=2) + "\n")
    md = [
        f"WikiText-2 perplexity, {out['eval']}; calibration {out['calibration']}.",
        "",
        "| recipe | k | layers | ppl |",
        "|---|---|---|---|",
        f"| base | 0 | - | {results['base']['ppl']:.2f} |",
    ]
    md += [
        f"| {r['mode']} {r['method'].upper()} ({r['criterion']}) | {r['k']} | {r['layers']} | {r['ppl']:.2f} |"
        for r in rows
    ]
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
