"""WikiText-2 perplexity of SmolLM2-135M per output form (nbl, linear, fold) x mode x k, one calibration per
form and mode (each form's own sums), layers ranked by each form's own scores.

    .venv/bin/python bench/forms_ppl.py [--num-samples 64] [--seq-len 256] [--max-tokens 16384] [--criterion cosine]

Attn at k = 4, 8; block at k = 2, 4. Each compressed model is built in memory (nbl: surgery.replaced; linear and
fold: form_layers.apply_form on a copy, fold's maps applied at run time, which the tests show equal the written,
folded checkpoints). Writes bench/results/forms_ppl.json and .md with the issue's targets checked.
"""

from __future__ import annotations

import argparse
import copy
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
from worker.engine.forms.fold_runs import fit_form_maps  # noqa: E402
from worker.engine.forms.form_layers import apply_form  # noqa: E402
from worker.engine.forms.surgery import Plan, replaced  # noqa: E402
from worker.engine.loading.load import load_model  # noqa: E402
from worker.engine.scoring.stage import fit_maps, layer_reader, score_stage  # noqa: E402
from worker.engine.selection.criteria import choose  # noqa: E402
from worker.eval.perplexity import corpus_text, perplexity  # noqa: E402

KS = {"attn": (4, 8), "block": (2, 4)}
FORMS = {"attn": ("nbl", "linear", "fold"), "block": ("nbl", "linear", "fold")}
# the targets: (form, mode, k) -> largest rise over nbl's perplexity at the same k
TARGETS = {
    ("linear", "attn", 4): 0.01,
    ("linear", "attn", 8): 0.01,
    ("fold", "attn", 4): 0.04,
    ("fold", "attn", 8): 0.07,
    ("fold", "block", 2): 0.08,
    ("fold", "block", 4): 0.12,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-samples", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=16384)
    ap.add_argument("--window", type=int, default=2048)
    ap.add_argument("--criterion", default="cosine", choices=("cca", "nmse", "cosine"))
    ap.add_argument("--out", type=Path, default=HERE / "results" / "forms_ppl")
    ap.add_argument("--modes", default="attn,block", help="a subset of attn,block")
    ap.add_argument("--forms", default="nbl,linear,fold", help="a subset of nbl,linear,fold (nbl: the reference)")
    ap.add_argument("--from-log", type=Path, help="write the tables from the rows an interrupted run printed")
    args = ap.parse_args()
    if args.from_log is not None:
        return from_log(args)
    os.environ.setdefault("NBL_DATA_DIR", str(HERE.parent.parent / "shared" / "data"))
    settings = Settings()
    lm = load_model(smollm2_gguf(), dtype="float32", device="cpu", models_dir=settings.models_dir, home=settings.home)
    text = corpus_text("wikitext2", settings.data_dir)

    def ppl(model) -> float:
        return perplexity(model, lm.tokenizer, text, window=args.window, max_tokens=args.max_tokens, progress=False)[
            "ppl"
        ]

    base = ppl(lm.model)
    print("base", base, flush=True)
    rows = []
    for mode, ks in KS.items():
        if mode not in args.modes.split(","):
            continue
        for form in [f for f in FORMS[mode] if f in args.forms.split(",")]:
            t = time.perf_counter()
            cfg = CompressConfig(
                model="smollm2",
                dataset=DatasetSpec("c4"),
                ks=list(ks),
                num_samples=args.num_samples,
                seq_len=args.seq_len,
                mode=mode,
                form=form,
                stats_dir=settings.stats_dir,
                data_dir=settings.data_dir,
            )
            cal = calibration_stage(cfg, lm, progress=False)
            scores = cal.scores if cal.scores is not None else score_stage(cal.stats, form=form)
            for k in ks:
                layers = choose(scores, mode, args.criterion, k)
                if form == "nbl":
                    with replaced(lm.model, Plan(mode, "nbl", tuple(layers)), fit_maps(cal.stats, mode, layers)):
                        value = ppl(lm.model)
                else:
                    model = copy.deepcopy(lm.model)
                    maps = fit_form_maps(layer_reader(cal.stats)[1], form, mode, layers)
                    apply_form(model, Plan(mode, "nbl", tuple(layers), form), maps)
                    value = ppl(model)
                    del model
                rows.append({"form": form, "mode": mode, "k": k, "layers": layers, "ppl": value})
                print(rows[-1], f"{time.perf_counter() - t:.0f} s", flush=True)
            cal.cleanup()
    write(args, base, rows)


def from_log(args) -> None:
    """The rows a run printed (`base X`, then one dict per row), for a run stopped before its end."""
    import ast

    lines = args.from_log.read_text().splitlines()
    base = next(float(x.split()[1]) for x in lines if x.startswith("base "))
    rows = [ast.literal_eval(x[: x.rindex("}") + 1]) for x in lines if x.startswith("{'form'")]
    write(args, base, rows, partial=True)


def write(args, base: float, rows: list[dict], partial: bool = False) -> None:
    nbl = {(r["mode"], r["k"]): r["ppl"] for r in rows if r["form"] == "nbl"}
    md = [
        "# Perplexity per output form (SmolLM2-135M-Instruct)",
        "",
        f"Calibration: C4 (c4_demo) {args.num_samples} x {args.seq_len} tokens; WikiText-2 raw test, first "
        f"{args.max_tokens} tokens, {args.window}-token windows; layers ranked by `{args.criterion}` on each "
        "form's own sums, float64 least squares, no refit. Base perplexity "
        f"**{base:.2f}**.",
        "",
        "| mode | k | form | layers | ppl | vs nbl | target | holds |",
        "|---|---:|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        ref = nbl.get((r["mode"], r["k"]))
        rise = r["ppl"] / ref - 1 if ref else float("nan")
        target = TARGETS.get((r["form"], r["mode"], r["k"]))
        holds = "-" if target is None or not ref else ("yes" if rise <= target else "**no**")
        md.append(
            f"| {r['mode']} | {r['k']} | {r['form']} | {r['layers']} | {r['ppl']:.2f} | {rise:+.1%} | "
            f"{'-' if target is None else f'≤ +{target:.0%}'} | {holds} |"
        )
    if partial:
        done = {(r["form"], r["mode"], r["k"]) for r in rows}
        missing = [
            f"{f} {m} k={k}"
            for m, ks in KS.items()
            for f in FORMS[m]
            for k in ks
            if (f, m, k) not in done and m in args.modes.split(",") and f in args.forms.split(",")
        ]
        md += ["", f"Not measured (the run was stopped before them): {', '.join(missing) or 'none'}."]
    command = "python bench/forms_ppl.py" if partial else "python " + " ".join(sys.argv)  # --from-log: the run's own
    md += ["", "Command:", "", "```", command, "```"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(
        json.dumps({"base": base, "rows": rows, "command": command}, indent=2) + "\n"
    )
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
