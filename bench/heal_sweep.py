"""Healing's step size and batch on SmolLM2: one output's maps healed at several (tokens, steps, lr), against
the same maps unhealed. What chose compression.heal's defaults (docs/quality.md#healings-steps-and-rate).

    NBL_DATA_DIR=../shared/data OMP_NUM_THREADS=1 taskset -c 0 .venv/bin/python bench/heal_sweep.py \
        --mode attn --k 8 --tokens 65536 --variant 64:1e-5 [--variant STEPS:LR ...]

Calibration C4 32 x 256 (as bench/quality2.py), layers ranked by CCA, the one-shot maps; the healing text is the
`--tokens` after the calibration's (a tenth held out), the teacher's top-64 logits computed once and shared by the
variants; each variant is worker/engine/refine/heal.heal as a job runs it (each step averages ceil(blocks / steps)
blocks, the rate on a cosine from lr to 0). Measured: the held-out perplexity before and after (C4), whether the
engine keeps the healed maps, and WikiText-2 test perplexity (first 4,096 tokens, 2,048-token windows) of the maps
a job would publish. Writes bench/results/heal_sweep_{mode}{k}.{json,md}; a second run with the same flags adds
the variants not measured yet. `--guard`: a job's selection dataset other than the calibration's (e.g. wikitext2,
its validation split, 16 blocks as a job's default selection), measured before and after as the heal's guard
(worker/engine/refine/stage.Refiner.guard): the maps are kept only if neither perplexity rose.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=("attn", "block"), default="attn")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=65536)
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="STEPS:LR",
        help="steps and peak rate of one healing run (repeatable; default 64:1e-5)",
    )
    ap.add_argument(
        "--guard",
        default=None,
        metavar="DATASET",
        help="the heal's guard: this dataset's validation split, --guard-samples blocks (as a job's selection dataset)",
    )
    ap.add_argument("--guard-samples", type=int, default=16)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    variants = [(int(s), float(r)) for s, r in (v.split(":") for v in args.variant or ["64:1e-5"])]
    out = args.out or HERE / "results" / f"heal_sweep_{args.mode}{args.k}{'_guard' if args.guard else ''}"
    done = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").exists() else {}
    if done.get("tokens") not in (None, args.tokens):
        sys.exit(f"{out}.json was measured with --tokens {done['tokens']}: give another --out")

    from engine_cpu import smollm2_gguf

    from nbl.recipe import Heal
    from nbl.refine_schema import blocks_per_step
    from service.core.settings import Settings
    from worker.engine.calibration.data import DatasetSpec
    from worker.engine.calibration.stage import calibration_stage
    from worker.engine.config import CompressConfig
    from worker.engine.forms.surgery import Plan, replaced
    from worker.engine.loading.load import load_model
    from worker.engine.refine.heal import heal, teacher_targets
    from worker.engine.refine.stage import Refiner, heal_split
    from worker.engine.scoring.stage import fit_maps, score_stage
    from worker.engine.selection.criteria import choose
    from worker.eval.perplexity import corpus_text, perplexity

    settings = Settings()
    lm = load_model(smollm2_gguf(), dtype="float32", device="cpu", models_dir=settings.models_dir, home=settings.home)
    cfg = CompressConfig(
        model="smollm2",
        dataset=DatasetSpec("c4"),
        ks=[args.k],
        num_samples=32,
        seq_len=256,
        mode=args.mode,
        heal=Heal(tokens=args.tokens),
        stats_dir=settings.home / "stats",
        data_dir=settings.data_dir,
    )
    cal = calibration_stage(cfg, lm, progress=False)
    scores = cal.scores if cal.scores is not None else score_stage(cal.stats)
    layers = choose(scores, args.mode, "cca", args.k)
    plan, maps = Plan(args.mode, "nbl", tuple(layers)), fit_maps(cal.stats, args.mode, layers)
    n_train, _ = heal_split(args.tokens, cfg.seq_len)
    rest = Refiner(cfg, lm, cal, lambda *a: None).blocks()[cfg.num_samples :]
    train, held = rest[:n_train], rest[n_train:]
    text = corpus_text("wikitext2", settings.data_dir)
    guard = None
    if args.guard:
        from worker.engine.calibration.data import load_texts, make_blocks

        guard = make_blocks(
            load_texts(DatasetSpec(args.guard, split="validation"), settings.data_dir),
            lm.tokenizer,
            args.guard_samples,
            cfg.seq_len,
        )

    def wikitext(m) -> float:
        with replaced(lm.model, plan, m):
            return perplexity(lm.model, lm.tokenizer, text, window=2048, max_tokens=4096, progress=False)["ppl"]

    rows = done.get("rows", [])
    if not rows:
        rows.append({"variant": "none", "wikitext_ppl": round(wikitext(maps), 4)})
    targets, teacher_s = None, done.get("teacher_s")
    for steps, lr in variants:
        if any(r.get("steps") == steps and r.get("lr") == lr for r in rows):
            continue
        if targets is None:
            t = time.perf_counter()
            targets = teacher_targets(lm.model, train)
            teacher_s = round(time.perf_counter() - t, 1)
        h = heal(lm.model, plan, maps, train, held, targets, steps=steps, lr=lr, guard=guard)
        rows.append(
            {
                "variant": "heal",
                "steps": steps,
                "lr": lr,
                "blocks_per_step": blocks_per_step(n_train, steps),
                **h.record(),
                "wikitext_ppl": round(wikitext(h.maps), 4),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
        write(out, args, layers, n_train, teacher_s, rows)
    write(out, args, layers, n_train, teacher_s, rows)
    cal.cleanup()


def write(out: Path, args, layers, n_train, teacher_s, rows) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(
        json.dumps(
            {
                "mode": args.mode,
                "k": args.k,
                "tokens": args.tokens,
                "layers": layers,
                "train_blocks": n_train,
                "teacher_s": teacher_s,
                "machine": platform.machine(),
                "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                "rows": rows,
            },
            indent=1,
        )
    )
    lines = [
        f"# Healing on SmolLM2, {args.mode} k={args.k} (layers {layers})",
        "",
        f"`bench/heal_sweep.py --mode {args.mode} --k {args.k} --tokens {args.tokens}"
        f"{f' --guard {args.guard} --guard-samples {args.guard_samples}' if args.guard else ''}` with each row's "
        f"`--variant STEPS:LR`: C4 32 x 256 calibration, CCA-ranked layers, {args.tokens:,} healing tokens after "
        f"the calibration's ({n_train} training blocks of 256, the rest held out), the teacher's top-64 logits "
        f"once ({teacher_s} s). WikiText-2 test, first 4,096 tokens. Seconds: one core, including the held-out "
        "perplexity before and after"
        + (
            f"; the guard: {args.guard} validation, {args.guard_samples} blocks of 256, before and after"
            if args.guard
            else ""
        )
        + ". WikiText-2 ppl is that "
        "of the maps the engine keeps (the one-shot maps when not kept).",
        "",
        "| variant | steps x blocks | peak lr | held-out ppl before -> after | guard ppl before -> after | kept | "
        "WikiText-2 ppl | seconds |",
        "|---|---|---:|---|---|---|---:|---:|",
    ]
    for r in rows:
        if r["variant"] == "none":
            lines.append(f"| one-shot maps | - | - | - | - | - | {r['wikitext_ppl']} | - |")
        else:
            lines.append(
                f"| heal | {r['steps']} x {r['blocks_per_step']} | {r['lr']:g} | {r['perplexity_before']} -> "
                f"{r['perplexity_after']} | "
                + (
                    f"{r['guard_perplexity_before']} -> {r['guard_perplexity_after']}"
                    if "guard_perplexity_before" in r
                    else "-"
                )
                + f" | {'yes' if r['kept'] else 'no'} | {r['wikitext_ppl']} | "
                f"{r['seconds']} |"
            )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
