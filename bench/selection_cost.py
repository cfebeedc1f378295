"""What measured selection costs on SmolLM2-135M, before and after prefix reuse and racing; and the spread of the
selection's perplexity rise that nbl/selection/rise_error.py's prior is taken from.

    .venv/bin/python bench/selection_cost.py [--selection-samples 8] [--seq-len 512] [--budget 0.2]

One calibration (C4, --num-samples x --seq-len; its sums give the maps, from the statistics cache when there),
then k auto at --budget with --criterion on WikiText-2 validation (--selection-samples blocks), twice:
  - before: every candidate set scored on every block, from the base model's states at its first replaced
    layer (what set_loss.py did before prefixes and racing: the SetLoss is hidden behind a plain function, so
    the greedy can neither warm prefixes nor race);
  - after: the engine's path (greedy.py with warm + race).
Each reports seconds, layer sets, (layer, batch) passes and the layers chosen. The calibration is timed again,
uncached, on as many C4 tokens as the selection data has ("the same token count"). From the before run, where
every set is scored on every block, each set's paired per-token spread s over log(1 + rise) (rise_error.py).
Written to bench/results/selection_cost.json and .md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import replace
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
from worker.engine.selection.auto_k import Chooser  # noqa: E402
from worker.engine.selection.set_loss import SetLoss  # noqa: E402
from worker.engine.selection.stage import selection_data  # noqa: E402


def select(lm, cal, scores, blocks, split, args, engine: bool) -> tuple[dict, SetLoss]:
    t, cpu = time.perf_counter(), time.process_time()
    sl = SetLoss(
        layer_source(lm),
        blocks,
        "attn",
        "nbl",
        lambda i: fit_maps(cal.stats, "attn", [i], split=split)[i],
        batch_size=args.batch_size,
    )
    loss = sl if engine else (lambda s: sl(s))  # noqa: E731 - a plain function: no warm, no racing
    ch = Chooser(scores, "attn", args.criterion, loss, sl.base, args.width)
    k = ch.auto_k(args.budget)
    layers, criterion = ch.layers(k)
    err = paired(sl.per_block(()).tolist(), sl.per_block(tuple(layers)).tolist(), blocks.shape[1] - 1)
    return {
        "seconds": round(time.perf_counter() - t, 1),
        "cpu_s": round(time.process_time() - cpu, 1),
        "k": k,
        "criterion": criterion,
        "layers": layers,
        "sets": len(sl.rows),
        "full_sets": len(sl.memo) + (() not in sl.memo),
        "layer_passes": sl.layer_passes,
        "greedy": [s["added"] for s in ch.greedy.steps],
        "raced_out": sum(len(s.get("raced_out", {})) for s in ch.greedy.steps),
        **err,
    }, sl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-samples", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--selection-samples", type=int, default=8)
    ap.add_argument("--budget", type=float, default=0.2)
    ap.add_argument("--criterion", default="greedy")
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=1, help="selection blocks per batch (racing steps by batches)")
    ap.add_argument("--cal-batch-size", type=int, default=8)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "selection_cost")
    args = ap.parse_args()
    os.environ.setdefault("NBL_DATA_DIR", str(HERE.parent.parent / "shared" / "data"))
    settings = Settings()
    out: dict = {
        "model": "SmolLM2-135M-Instruct",
        "mode": "attn",
        "method": "nbl",
        "budget": args.budget,
        "criterion": args.criterion,
        "width": args.width,
        "command": " ".join(["python", *sys.argv]),
        "machine": f"{os.cpu_count()} CPUs (shared), float32, selection batch {args.batch_size}, "
        f"calibration batch {args.cal_batch_size}",
    }

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")

    lm = load_model(smollm2_gguf(), dtype="float32", device="cpu", models_dir=settings.models_dir, home=settings.home)
    cfg = CompressConfig(
        model="smollm2",
        dataset=DatasetSpec("c4"),
        ks=[4],
        num_samples=args.num_samples,
        seq_len=args.seq_len,
        criterion=args.criterion,
        stats_dir=settings.stats_dir,
        data_dir=settings.data_dir,
        batch_size=args.cal_batch_size,
    )
    cal = calibration_stage(cfg, lm)
    scores = cal.scores or score_stage(cal.stats)
    out["calibration"] = {
        "blocks": args.num_samples,
        "tokens": cal.meta.get("tokens"),
        "cached": cal.cached,
        "seconds": cal.meta.get("seconds"),
    }
    scfg = replace(
        cfg, selection=DatasetSpec("wikitext2", split="validation"), selection_samples=args.selection_samples
    )
    blocks, data, split = selection_data(scfg, lm, cal)
    out["selection_data"] = {**{k: str(v) for k, v in data.items()}, "tokens": int(blocks[:, 1:].numel())}

    with tempfile.TemporaryDirectory() as tmp:  # the calibration on the selection's token count, uncached
        t, cpu = time.perf_counter(), time.process_time()
        calibration_stage(replace(cfg, num_samples=args.selection_samples, stats_dir=Path(tmp), use_cache=False), lm)
        out["calibration_same_tokens"] = {
            "blocks": args.selection_samples,
            "seconds": round(time.perf_counter() - t, 1),
            "cpu_s": round(time.process_time() - cpu, 1),
        }
    save()
    print("calibration", out["calibration"], out["calibration_same_tokens"], flush=True)

    out["before"], before = select(lm, cal, scores, blocks, split, args, engine=False)
    save()
    print("before", out["before"], flush=True)
    base = before.per_block(()).tolist()
    spreads = []
    for key in before.memo:
        e = paired(base, before.per_block(key).tolist(), blocks.shape[1] - 1)
        if key and e["rise"] is not None and e["rise"] > 0.01 and e["sd_per_token"] is not None:
            spreads.append(
                {
                    "layers": list(key),
                    "rise": e["rise"],
                    "rise_se": e["rise_se"],
                    "sd_per_token": e["sd_per_token"],
                    "ratio": e["sd_per_token"] / math.log1p(e["rise"]),
                }
            )
    out["spreads"] = spreads
    del before
    out["after"], _ = select(lm, cal, scores, blocks, split, args, engine=True)
    print("after", out["after"], flush=True)
    save()
    write_md(out, args.out.with_suffix(".md"))


def write_md(out: dict, path: Path) -> None:
    b, a, c = out["before"], out["after"], out["calibration_same_tokens"]
    ratios = sorted(s["ratio"] for s in out["spreads"])
    q = lambda f: ratios[min(len(ratios) - 1, int(f * len(ratios)))] if ratios else float("nan")  # noqa: E731
    md = [
        f"# Cost of measured selection: {out['model']}, Attn NBL, k auto +{out['budget']:.0%} ({out['criterion']})",
        "",
        f"`{out['command']}`; {out['machine']}. Selection data: WikiText-2 validation, "
        f"{out['selection_data']['num_samples']} blocks, {out['selection_data']['tokens']} tokens; maps from C4 "
        f"{out['calibration']['blocks']} blocks ({out['calibration']['tokens']} tokens).",
        "",
        "| | wall s | CPU s | x calibration (CPU s, same tokens) | layer sets | (layer, batch) passes | raced out | k | layers |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in (("before", b), ("after", a)):
        md.append(
            f"| {name} | {r['seconds']} | {r['cpu_s']} | {r['cpu_s'] / c['cpu_s']:.1f} | {r['sets']} | {r['layer_passes']} | "
            f"{r.get('raced_out', 0)} | {r['k']} | {r['layers']} |"
        )
    same = b["layers"] == a["layers"] and b["greedy"] == a["greedy"]
    md += [
        "",
        f"Calibration on the same token count ({c['blocks']} C4 blocks, uncached): {c['seconds']} s wall, "
        f"{c['cpu_s']} CPU s. The machine's 2 cores are shared with other jobs: wall seconds are noisy, CPU seconds "
        "and the pass counts less so. "
        f"Greedy order before {b['greedy']}, after {a['greedy']}: "
        + ("the same layers chosen." if same else "**the chosen layers differ**."),
        "",
        f"Chosen set's rise on the selection data {100 * a['rise']:.1f}% ± {100 * (a['rise_se'] or float('nan')):.1f}% "
        f"(paired standard error over {a['blocks']} blocks; per-token spread s = {a['sd_per_token']:.2f}).",
        "",
        f"Spread s / log(1 + rise) over the {len(ratios)} sets with a rise above 1% (before run, every set on every "
        f"block): median {q(0.5):.2f}, 90th percentile {q(0.9):.2f}, largest {q(1.0) if ratios else float('nan'):.2f} "
        "(nbl/selection/rise_error.py PRIOR_S_PER_LOG_RISE).",
        "",
    ]
    path.write_text("\n".join(md))


if __name__ == "__main__":
    main()
