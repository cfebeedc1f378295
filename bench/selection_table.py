"""Measured selection on SmolLM2-135M: greedy and auto against the fixed criteria, and k auto's budgets.

    .venv/bin/python bench/selection_table.py [--num-samples 64] [--seq-len 512] [--selection-samples 8]

One calibration (C4, 64 x 512), Attn NBL at k = 4, 8, 12, WikiText-2 raw test perplexity (the first
--max-tokens tokens, 2048-token windows, as bench/ppl_table.py) of each layer set chosen by:
  - the fixed criteria cca, cosine, nmse (the calibration's sums only);
  - greedy and auto (worker/engine/selection/auto_k.py), measured on two selection data sets in turn:
    WikiText-2 *validation* (--selection-samples blocks of --seq-len: the target domain, never the test
    split that is evaluated), then the default, the calibration's own held-out tenth (C4);
  - k auto with auto criterion on the WikiText-2 validation selection, at budgets of 5, 10 and 20 %:
    the k found, the selection data's rise, and the rise measured on WikiText-2 test.
Each layer set is evaluated once (memoised). Written as it goes to bench/results/selection_table.json,
then .md. The engine's own stage functions are used, so these are the sets a job would publish.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from engine_cpu import smollm2_gguf  # noqa: E402

from service.core.settings import Settings  # noqa: E402
from worker.engine.calibration.data import DatasetSpec  # noqa: E402
from worker.engine.calibration.stage import calibration_stage, layer_source  # noqa: E402
from worker.engine.config import CompressConfig  # noqa: E402
from worker.engine.forms.surgery import Plan, replaced  # noqa: E402
from worker.engine.loading.load import load_model  # noqa: E402
from worker.engine.scoring.stage import fit_maps, score_stage  # noqa: E402
from worker.engine.selection.auto_k import Chooser  # noqa: E402
from worker.engine.selection.criteria import choose  # noqa: E402
from worker.engine.selection.greedy import CHEAP  # noqa: E402
from worker.engine.selection.set_loss import SetLoss  # noqa: E402
from worker.engine.selection.stage import selection_data  # noqa: E402
from worker.eval.perplexity import corpus_text, perplexity  # noqa: E402

KS = (4, 8, 12)
BUDGETS = (0.05, 0.10, 0.20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-samples", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--selection-samples", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32768)
    ap.add_argument("--window", type=int, default=2048)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "selection_table")
    ap.add_argument("--resume", action="store_true", help="keep the evaluations --out's JSON already holds")
    ap.add_argument(
        "--seed-from",
        type=Path,
        default=HERE / "results" / "ppl_table.json",
        help="take the fixed criteria's perplexities from this ppl_table.py run where the layers, calibration "
        "and evaluation are the same (marked with their source); a missing file: evaluate them all",
    )
    args = ap.parse_args()
    os.environ.setdefault("NBL_DATA_DIR", str(HERE.parent.parent / "shared" / "data"))
    settings = Settings()
    out: dict = {
        "model": "SmolLM2-135M-Instruct",
        "mode": "attn",
        "method": "nbl",
        "calibration": f"c4 {args.num_samples}x{args.seq_len}",
        "eval": f"WikiText-2 raw test, first {args.max_tokens} tokens, window {args.window}",
        "command": " ".join(["python", *sys.argv]),
        "machine": f"{os.cpu_count()} CPUs, float32",
        "evals": {},
        "selections": {},
        "k_auto": [],
    }

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")

    t0 = time.perf_counter()
    lm = load_model(smollm2_gguf(), dtype="float32", device="cpu", models_dir=settings.models_dir, home=settings.home)
    cfg = CompressConfig(
        model="smollm2",
        dataset=DatasetSpec("c4"),
        ks=list(KS),
        num_samples=args.num_samples,
        seq_len=args.seq_len,
        criterion="auto",
        stats_dir=settings.stats_dir,
        data_dir=settings.data_dir,
    )
    cal = calibration_stage(cfg, lm)
    scores = cal.scores or score_stage(cal.stats)
    out["calibration_s"] = round(time.perf_counter() - t0, 1)
    out["calibration_tokens"] = cal.meta.get("tokens")
    text = corpus_text("wikitext2", settings.data_dir)
    if args.resume and args.out.with_suffix(".json").exists():
        out["evals"] = json.loads(args.out.with_suffix(".json").read_text())["evals"]
    seeds = {}
    if args.seed_from and args.seed_from.exists():
        prior = json.loads(args.seed_from.read_text())
        if prior["calibration"].endswith(f"{args.num_samples}x{args.seq_len}") and prior["eval"] == out["eval"]:
            seeds = {
                ",".join(map(str, r["layers"])): {
                    "layers": r["layers"],
                    "ppl": r["ppl"],
                    "tokens": r["tokens"],
                    "source": str(args.seed_from.name),
                }
                for r in prior["rows"]
                if (r["mode"], r["method"]) == ("attn", "nbl")
            }
            seeds[""] = {"layers": [], "ppl": prior["base"]["ppl"]}
            # the sets both runs evaluated: does the seed reproduce?
            out["seed_check"] = [
                {"layers": v["layers"], "here": v["ppl"], "seed": seeds[k]["ppl"]}
                for k, v in out["evals"].items()
                if k in seeds and not v.get("source")
            ]

    def ppl(layers: tuple[int, ...], seeded: bool = False) -> float:
        """WikiText-2 test perplexity with `layers` replaced, maps from all the sums (as a job's output); `seeded`:
        a fixed criterion's set, taken from --seed-from when that run evaluated the same set."""
        key = ",".join(map(str, layers))
        if seeded and key in seeds and key not in out["evals"]:
            out["evals"][key] = seeds[key]
        if key not in out["evals"]:
            t = time.perf_counter()
            maps = fit_maps(cal.stats, "attn", layers) if layers else {}
            with replaced(lm.model, Plan("attn", "nbl", tuple(layers)), maps):
                r = perplexity(
                    lm.model, lm.tokenizer, text, window=args.window, max_tokens=args.max_tokens, progress=False
                )
            out["evals"][key] = {
                "layers": list(layers),
                "ppl": r["ppl"],
                "tokens": r["tokens"],
                "seconds": round(time.perf_counter() - t, 1),
            }
            print("eval", out["evals"][key], flush=True)
            save()
        return out["evals"][key]["ppl"]

    base = ppl(())
    fixed = {c: {k: choose(scores, "attn", c, k) for k in KS} for c in CHEAP}
    out["fixed"] = fixed
    for c in ("cca", "cosine"):  # nmse last: the measured criteria come first
        for k in KS:
            ppl(tuple(fixed[c][k]), seeded=True)

    settings_ = [
        (
            "wikitext2_validation",
            replace(
                cfg, selection=DatasetSpec("wikitext2", split="validation"), selection_samples=args.selection_samples
            ),
        ),
        ("c4_heldout", cfg),
    ]
    for name, scfg in settings_:
        t = time.perf_counter()
        blocks, data, split = selection_data(scfg, lm, cal)
        set_loss = SetLoss(
            layer_source(lm),
            blocks,
            "attn",
            "nbl",
            lambda i, split=split: fit_maps(cal.stats, "attn", [i], split=split)[i],
            batch_size=cal.meta.get("batch_size", 1),
        )
        chooser = Chooser(scores, "attn", "auto", set_loss, set_loss.base, scfg.greedy_width)
        chosen = {k: chooser.layers(k) for k in KS}
        rec = chooser.record(data, set_loss.tokens, chosen)
        rec["seconds"] = round(time.perf_counter() - t, 1)
        rec["sets_measured"] = len(set_loss.memo) + 1
        out["selections"][name] = rec
        save()
        print(
            "selection",
            name,
            rec["seconds"],
            "s",
            [(c["k"], c["criterion"], c["layers"]) for c in rec["chosen"]],
            flush=True,
        )
        for k in KS:
            ppl(tuple(chooser.greedy.layers(k)))
            ppl(tuple(chosen[k][0]))
        if name == "wikitext2_validation":
            for budget in BUDGETS:
                t = time.perf_counter()
                k = chooser.auto_k(budget)
                layers, criterion = chooser.layers(k)
                sel_ppl = chooser.loss(tuple(layers))
                test = ppl(tuple(layers))
                out["k_auto"].append(
                    {
                        "budget": budget,
                        "k": k,
                        "criterion": criterion,
                        "layers": layers,
                        "selection_rise": __import__("math").exp(sel_ppl - set_loss.base) - 1,
                        "test_ppl": test,
                        "test_rise": test / base - 1,
                        "seconds": round(time.perf_counter() - t, 1),
                    }
                )
                print("k auto", out["k_auto"][-1], flush=True)
                save()
            out["selections"][name]["tried"] = chooser.record(data, set_loss.tokens, chosen)["tried"]
            out["selections"][name]["sets_measured"] = len(set_loss.memo) + 1
    for k in KS:
        ppl(tuple(fixed["nmse"][k]))
    out["total_s"] = round(time.perf_counter() - t0, 1)
    save()
    write_md(out, args.out.with_suffix(".md"))


def write_md(out: dict, path: Path) -> None:
    ev = {tuple(v["layers"]): v["ppl"] for v in out["evals"].values()}
    base = ev[()]
    seeded = sorted({v["source"] for v in out["evals"].values() if v.get("source")})

    def f(layers) -> str:
        return f"{ev[tuple(layers)]:.2f}" if tuple(layers) in ev else "not run"

    fixed = {c: {int(k): tuple(v) for k, v in d.items()} for c, d in out["fixed"].items()}
    md = [
        f"# Choosing layers: SmolLM2-135M, Attn NBL, WikiText-2 test perplexity (base {base:.2f})",
        "",
        f"Calibration {out['calibration']}; {out['eval']}; `{out['command']}`; {out['machine']}; "
        f"{out.get('total_s', 0):.0f} s in all."
        + (
            f" The cca and cosine rows not re-run were taken from {', '.join(seeded)} (same calibration, layers and "
            "evaluation); re-run here: "
            + "; ".join(
                f"{c['layers'] or 'base'} {c['here']:.4f} (seed {c['seed']:.4f})" for c in out.get("seed_check", [])
            )
            + "."
            if seeded
            else ""
        ),
        "",
    ]
    for name, rec in out["selections"].items():
        chosen = {c["k"]: (c["criterion"], tuple(c["layers"])) for c in rec["chosen"]}
        greedy = {t["k"]: tuple(t["layers"]) for t in rec["tried"] if t["criterion"] == "greedy"}
        d = rec["data"]
        what = (
            f"{d['path']} {d['split']}, {d['num_samples']} blocks"
            if d["source"] == "selection dataset"
            else f"the calibration's held-out tenth ({d['num_samples']} C4 blocks, in-distribution)"
        )
        md += [
            f"## Selection data: {what}, {rec['tokens']} tokens ({rec['sets_measured']} layer sets measured in "
            f"{rec['seconds']:.0f} s)",
            "",
            "| k | cca | cosine | nmse | greedy | auto (winner) | best fixed |",
            "|---|---|---|---|---|---|---|",
        ]
        for k in sorted(chosen):
            row = {c: ev[fixed[c][k]] for c in fixed if fixed[c][k] in ev}
            auto_c, auto_l = chosen[k]
            md.append(
                f"| {k} | "
                + " | ".join(f(fixed[c][k]) for c in fixed)
                + f" | {f(greedy[k])} | {f(auto_l)} ({auto_c}) | {min(row.values()):.2f} ({min(row, key=row.get)}) |"
            )
        md.append("")
    if out["k_auto"]:
        md += [
            "## k auto (criterion auto, WikiText-2 validation selection)",
            "",
            "| budget | k found | criterion | layers | rise on selection data | WikiText-2 test ppl | rise on test |",
            "|---|---|---|---|---|---|---|",
        ]
        md += [
            f"| {r['budget']:.0%} | {r['k']} | {r['criterion']} | {r['layers']} | {r['selection_rise']:+.1%} | "
            f"{r['test_ppl']:.2f} | {r['test_rise']:+.1%} |"
            for r in out["k_auto"]
        ]
    path.write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
