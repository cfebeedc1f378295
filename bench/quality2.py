"""SmolLM2-135M: the maps as fitted (none), refitted in depth order (sequential), healed (heal), or both, for Attn NBL
k = 4, 8, 12 and Block NBL k = 2, 4: WikiText-2 perplexity, ARC-e, and the time of each stage.

    nice -n 10 .venv/bin/python bench/quality2.py [--num-samples 32] [--seq-len 256] [--max-tokens 8192]
        [--arc-limit 100] [--heal-tokens 16384] [--heal-steps 128] [--heal-lr 1e-4] [--work /tmp/quality2]

The engine's own stages (worker/engine/refine/stage.Refiner): calibration on C4 (c4_demo), layers ranked by the
CCA bound (the default criterion), one-shot LMMSE maps; `sequential` refits them on the compressed model's own
activations; `heal` trains them against the base's top-64 logits on the C4 blocks after the calibration's (a tenth
held out; maps that raise its perplexity are not kept); `both` heals the refitted maps. Every variant of a (mode, k)
replaces the same layers. Measured in memory (surgery.replaced), float32 on the CPU. Rows are kept in
WORK/rows.json as they finish: a stopped run resumes where it stopped. Writes bench/results/quality2_table.{json,md}.
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

CONFIGS = [("attn", 8), ("attn", 12), ("block", 4), ("attn", 4), ("block", 2)]  # most telling first
VARIANTS = ("none", "sequential", "heal", "both")
EXTRA = ("teacher",)  # --variants teacher: the refit's target from the base's own stream (refit.py target="teacher")


def measure(model, lm, args, text, arc) -> dict:
    from worker.eval.harness import run_task
    from worker.eval.perplexity import perplexity

    t = time.perf_counter()
    ppl = perplexity(model, lm.tokenizer, text, window=args.window, max_tokens=args.max_tokens, progress=False)["ppl"]
    acc = run_task(model, lm.tokenizer, arc) if args.arc_limit else {}
    return {
        "ppl": ppl,
        "arc_acc": acc.get("acc"),
        "arc_acc_norm": acc.get("acc_norm"),
        "arc_n": acc.get("n"),
        "measure_s": round(time.perf_counter() - t, 1),
    }


def run(args, rows: dict, save) -> None:
    from engine_cpu import smollm2_gguf

    from nbl.recipe import Heal
    from service.core.settings import Settings
    from worker.engine.calibration.data import DatasetSpec
    from worker.engine.calibration.stage import calibration_stage
    from worker.engine.config import CompressConfig
    from worker.engine.forms.surgery import Plan, replaced
    from worker.engine.loading.load import load_model
    from worker.engine.refine.heal import teacher_targets
    from worker.engine.refine.stage import Refiner, heal_split
    from worker.engine.scoring.stage import fit_maps, score_stage
    from worker.engine.selection.criteria import choose
    from worker.eval.benchmarks.registry import load_task
    from worker.eval.perplexity import corpus_text

    settings = Settings()
    lm = load_model(smollm2_gguf(), dtype="float32", device="cpu", models_dir=settings.models_dir, home=settings.home)
    text = corpus_text("wikitext2", settings.data_dir)
    arc = load_task("arc_easy", limit=args.arc_limit or 1, data_dir=settings.data_dir)
    if "base" not in rows:
        rows["base"] = {"mode": "-", "k": 0, "variant": "base", "layers": [], **measure(lm.model, lm, args, text, arc)}
        save(rows)
    heal = Heal(tokens=args.heal_tokens, steps=args.heal_steps, lr=args.heal_lr)
    for mode in args.modes.split(","):
        variants = args.variants.split(",")
        todo = [
            (m, k)
            for m, k in CONFIGS
            if m == mode and (not args.ks or k in args.ks) and any(f"{m}-k{k}-{v}" not in rows for v in variants)
        ]
        if not todo:
            continue
        cfg = CompressConfig(
            model="smollm2",
            dataset=DatasetSpec("c4"),
            ks=[k for _, k in todo],
            num_samples=args.num_samples,
            seq_len=args.seq_len,
            mode=mode,
            refit="sequential",
            heal=heal,
            stats_dir=args.work / "stats",
            data_dir=settings.data_dir,
        )
        t = time.perf_counter()
        cal = calibration_stage(cfg, lm, progress=False)
        calibrate_s = round(time.perf_counter() - t, 1)
        scores = cal.scores if cal.scores is not None else score_stage(cal.stats)
        refiner = Refiner(cfg, lm, cal, lambda *a: None)
        if {"heal", "both"} & set(variants):
            t = time.perf_counter()
            refiner._targets = teacher_targets(
                lm.model, refiner.blocks()[cfg.num_samples :][: heal_split(heal.tokens, cfg.seq_len)[0]]
            )  # once per mode, as once per run in a job
            rows.setdefault("teacher", {})[mode] = round(time.perf_counter() - t, 1)
        for _, k in todo:
            layers = choose(scores, mode, "cca", k)
            plan = Plan(mode, "nbl", tuple(layers))
            one_shot = fit_maps(cal.stats, mode, layers)
            refit_maps, refit_rec = None, None
            for v in variants:
                key = f"{mode}-k{k}-{v}"
                if key in rows:
                    continue
                row = {"mode": mode, "k": k, "variant": v, "layers": layers, "calibrate_s": calibrate_s}
                maps = one_shot
                if v in ("sequential", "both"):
                    if refit_maps is None:
                        refit_maps, refit_rec = refiner._refit(plan, one_shot, k)
                    maps, row["refit"] = refit_maps, refit_rec
                if v in ("heal", "both"):
                    maps, row["heal"] = refiner._heal(plan, maps, k)
                if v == "teacher":
                    from worker.engine.refine.refit import sequential_refit

                    meta = cal.meta
                    r = sequential_refit(
                        lm.model,
                        refiner.blocks()[: cfg.num_samples],
                        plan,
                        one_shot,
                        batch_size=meta["batch_size"],
                        holdout=meta["holdout_blocks"],
                        target="teacher",
                    )
                    maps, row["refit"] = r.maps, r.record()
                with replaced(lm.model, plan, maps):
                    row.update(measure(lm.model, lm, args, text, arc))
                rows[key] = row
                save(rows)
                print(json.dumps({x: y for x, y in row.items() if x not in ("refit",)}), flush=True)
        cal.cleanup()


def write(args, rows: dict) -> None:
    base = rows.get("base")
    md = [
        "# Refit and healing of the maps on SmolLM2-135M-Instruct",
        "",
        f"Calibration C4 (c4_demo) {args.num_samples} x {args.seq_len} tokens; layers ranked by the CCA bound "
        "(the default criterion), the same layers for every variant of a row. `none`: the one-shot LMMSE maps; "
        "`sequential`: refitted in depth order on the compressed model's own activations (compression.refit); "
        f"`heal`: trained against the base's top-64 logits, {args.heal_tokens} C4 tokens after the calibration's "
        f"(a tenth held out), {args.heal_steps} steps of one {args.seq_len}-token block, Adam lr {args.heal_lr} "
        "(compression.heal); `both`: the refitted maps healed; `teacher` (where measured): the refit regressing the "
        "base's branch on the base's own stream instead (refit.py target='teacher', not offered in requests). "
        "WikiText-2 raw test, first "
        f"{args.max_tokens} tokens in {args.window}-token windows (float32). ARC-Easy test, first {args.arc_limit} "
        "questions, zero-shot (worker/eval). Times: seconds on "
        f"{platform.machine()}, {os.cpu_count()} cores shared with other work (calibration is shared by a mode's "
        "rows; heal includes its perplexity before and after).",
        "",
        "| mode | k | variant | WikiText-2 ppl | rise over base | ARC-e acc / acc_norm | refit s | heal s | "
        "heal held-out ppl before → after |",
        "|---|---:|---|---:|---:|---|---:|---:|---|",
    ]
    if base:
        md.append(f"| base | 0 | - | {base['ppl']:.2f} | - | {_arc(base)} | - | - | - |")
    missing = []
    for mode, k in CONFIGS:
        keys = [f"{mode}-k{k}-{v}" for v in VARIANTS]  # then any other variant measured (--variants, --merge)
        keys += [key for key in rows if key.startswith(f"{mode}-k{k}-") and key not in keys]
        for key in keys:
            r, v = rows.get(key), key.split("-", 2)[2]
            if r is None:
                missing.append(f"{mode} k={k} {v}")
                continue
            v = r.get("variant", v)
            rise = f"+{100 * (r['ppl'] / base['ppl'] - 1):.1f}%" if base else "-"
            h = r.get("heal")
            heal_txt = (
                "-"
                if not h
                else (
                    f"{h['perplexity_before']:.2f} → {h['perplexity_after']:.2f}" + ("" if h["kept"] else " (not kept)")
                )
            )
            md.append(
                f"| {mode} | {k} | {v} | {r['ppl']:.2f} | {rise} | {_arc(r)} | "
                f"{r['refit']['seconds'] if r.get('refit') else '-'} | {h['seconds'] if h else '-'} | {heal_txt} |"
            )
    if "teacher" in rows:
        md += [
            "",
            "Teacher logits (once per run, shared by its outputs): "
            + ", ".join(f"{m} {s} s" for m, s in rows["teacher"].items())
            + ". Calibration: "
            + ", ".join(
                sorted(
                    {
                        f"{r['mode']} {r['calibrate_s']} s"
                        for r in rows.values()
                        if isinstance(r, dict) and "calibrate_s" in r
                    }
                )
            )
            + " (0 s: from the statistics cache).",
        ]
    if missing:
        md += ["", f"Not measured (the run stopped before them): {', '.join(missing)}."]
    md += [
        "",
        f"ARC-e standard error at n={args.arc_limit} is at most ±{(0.25 / max(args.arc_limit, 1)) ** 0.5:.3f}: "
        "differences under twice that are noise.",
        "",
        "Command (a second run with the same --work resumes):",
        "",
        "```",
        f"nice -n 10 .venv/bin/python bench/quality2.py --num-samples {args.num_samples} --seq-len "
        f"{args.seq_len} --max-tokens {args.max_tokens} --arc-limit {args.arc_limit} --heal-tokens "
        f"{args.heal_tokens} --heal-steps {args.heal_steps} --heal-lr {args.heal_lr} --work {args.work}",
        "```",
    ]
    if args.merge:
        md += [
            "",
            "This table merges runs made side by side with the flags above plus, each with its own --work "
            "(the base row copied in, the statistics cache shared): `--modes block`; `--modes attn --ks 8 "
            "--variants heal --heal-lr 2e-5` (its row renamed `attn-k8-heal-lr2e-5`); `--modes attn --ks 12 8 "
            "--variants teacher`. Then `--write-only --merge WORK2/rows.json ...`.",
        ]
    (HERE / "results" / "quality2_table.json").write_text(
        json.dumps({"settings": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=1) + "\n"
    )
    (HERE / "results" / "quality2_table.md").write_text("\n".join(md) + "\n")


def _arc(r: dict) -> str:
    return "-" if r.get("arc_acc") is None else f"{r['arc_acc']:.3f} / {r['arc_acc_norm']:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-samples", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=8192)
    ap.add_argument("--window", type=int, default=2048)
    ap.add_argument("--arc-limit", type=int, default=100, help="ARC-e questions (0: none)")
    ap.add_argument("--heal-tokens", type=int, default=16384)
    ap.add_argument("--heal-steps", type=int, default=128)
    ap.add_argument("--heal-lr", type=float, default=1e-4)
    ap.add_argument("--work", type=Path, default=Path("/tmp/quality2"))
    ap.add_argument("--modes", default="attn,block", help="the modes to measure (two runs may share the rows: --merge)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"of {VARIANTS + EXTRA}")
    ap.add_argument("--ks", type=int, nargs="*", default=[], help="only these k")
    ap.add_argument("--merge", type=Path, nargs="*", default=[], help="other runs' WORK/rows.json to add to the table")
    ap.add_argument("--write-only", action="store_true", help="the table from WORK's rows, nothing measured")
    args = ap.parse_args()
    os.environ.setdefault("NBL_DATA_DIR", str(HERE.parent.parent / "shared" / "data"))
    args.work.mkdir(parents=True, exist_ok=True)
    state = args.work / "rows.json"
    rows = json.loads(state.read_text()) if state.exists() else {}
    for other in args.merge:
        theirs = json.loads(other.read_text())
        rows.update({k: v for k, v in theirs.items() if k not in rows and k != "teacher"})
        for mode, secs in theirs.get("teacher", {}).items():
            rows.setdefault("teacher", {}).setdefault(mode, secs)

    def save(r: dict) -> None:
        state.write_text(json.dumps(r, indent=1))
        write(args, r)

    if not args.write_only:
        run(args, rows, save)
    write(args, rows)


if __name__ == "__main__":
    main()
