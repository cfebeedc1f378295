"""Method against criterion on SmolLM2-135M: zero-shot accuracy of Attn NBL (cosine, greedy, auto) and Attn DROP
(cosine) at k = 4 and 8, beside the base.

    .venv/bin/python bench/accuracy_table.py [--limit 500] [--tasks arc_easy,hellaswag,boolq]

The greedy and auto layer sets are those bench/selection_table.py chose with WikiText-2 validation as selection
data (read from bench/results/selection_table.json, run it first); the calibration (C4, 64 x 512) is the same,
read from the statistics cache under NBL_HOME when selection_table.py ran with the same NBL_HOME. Every model is
the one in-memory SmolLM2 with the layers swapped (worker/engine/forms/surgery.replaced), scored by the evaluation's own
task runner (lm-eval prompts and metrics, the first --limit documents of each task). Layer sets that coincide are
scored once. Written as it goes to bench/results/accuracy_table.json, then .md.
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

import torch  # noqa: E402
from engine_cpu import smollm2_gguf  # noqa: E402

from service.core.settings import Settings  # noqa: E402
from worker.engine.calibration.data import DatasetSpec  # noqa: E402
from worker.engine.calibration.stage import calibration_stage  # noqa: E402
from worker.engine.config import CompressConfig  # noqa: E402
from worker.engine.forms.surgery import Plan, replaced  # noqa: E402
from worker.engine.loading.load import load_model  # noqa: E402
from worker.engine.scoring.stage import fit_maps, score_stage  # noqa: E402
from worker.engine.selection.criteria import choose  # noqa: E402
from worker.eval.benchmarks.registry import load_task  # noqa: E402
from worker.eval.harness import run_task  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=500)
    ap.add_argument("--tasks", default="arc_easy,hellaswag,boolq")
    ap.add_argument("--num-samples", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (selection_table.py may run beside)")
    ap.add_argument("--selection", type=Path, default=HERE / "results" / "selection_table.json")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "accuracy_table")
    ap.add_argument("--resume", action="store_true", help="keep the models --out's JSON already scored on these tasks")
    args = ap.parse_args()
    os.environ.setdefault("NBL_DATA_DIR", str(HERE.parent.parent / "shared" / "data"))
    settings = Settings()
    tasks = [t for t in args.tasks.split(",") if t]

    t0 = time.perf_counter()
    lm = load_model(smollm2_gguf(), dtype="float32", device="cpu", models_dir=settings.models_dir, home=settings.home)
    cfg = CompressConfig(
        model="smollm2",
        dataset=DatasetSpec("c4"),
        ks=[4, 8],
        num_samples=args.num_samples,
        seq_len=args.seq_len,
        stats_dir=settings.stats_dir,
        data_dir=settings.data_dir,
    )
    cal = calibration_stage(cfg, lm)
    scores = cal.scores or score_stage(cal.stats)
    torch.set_num_threads(args.threads)
    rows = [("base", "nbl", "-", 0, [])]
    for k in (4, 8):
        rows += [
            (f"Attn NBL-{k} (cosine)", "nbl", "cosine", k, choose(scores, "attn", "cosine", k)),
            (f"Attn DROP-{k} (cosine)", "drop", "cosine", k, choose(scores, "attn", "cosine", k)),
        ]
    # the measured sets last: selection_table.py may still be running, and writes them when it has them
    rows += [(f"Attn NBL-{k} ({c})", "nbl", c, k, None) for k in (4, 8) for c in ("greedy", "auto")]
    out = {
        "model": "SmolLM2-135M-Instruct",
        "calibration": f"c4 {args.num_samples}x{args.seq_len}",
        "limit": args.limit,
        "tasks": tasks,
        "command": " ".join(["python", *sys.argv]),
        "machine": f"{os.cpu_count()} CPUs, float32",
        "calibration_s": round(time.perf_counter() - t0, 1),
        "threads": args.threads,
        "rows": [],
    }
    done: dict[tuple, dict] = {}
    if args.resume and args.out.with_suffix(".json").exists():
        for r in json.loads(args.out.with_suffix(".json").read_text())["rows"]:
            if all(t in r for t in tasks):
                done[(r["method"], tuple(r["layers"]))] = {
                    **{t: r[t] for t in tasks},
                    "seconds": r["seconds"],
                    "resumed": True,
                }
    loaded = {t: load_task(t, args.limit, settings.data_dir) for t in tasks}
    for name, method, criterion, k, layers in rows:
        if layers is None:
            sel = measured(args.selection)
            out["selection_data"] = sel["data"]
            if criterion == "greedy":
                layers = next(t["layers"] for t in sel["tried"] if t["criterion"] == "greedy" and t["k"] == k)
            else:
                won = next(c for c in sel["chosen"] if c["k"] == k)
                name, layers = f"Attn NBL-{k} (auto: {won['criterion']})", won["layers"]
        key = (method, tuple(layers))
        if key not in done:
            t = time.perf_counter()
            maps = fit_maps(cal.stats, "attn", layers) if method == "nbl" and layers else {}
            with replaced(lm.model, Plan("attn", method, tuple(layers)), maps):
                done[key] = {task: run_task(lm.model, lm.tokenizer, loaded[task]) for task in tasks}
            done[key]["seconds"] = round(time.perf_counter() - t, 1)
        out["rows"].append(
            {"name": name, "method": method, "criterion": criterion, "k": k, "layers": layers, **done[key]}
        )
        print(out["rows"][-1], flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
    out["total_s"] = round(time.perf_counter() - t0, 1)
    args.out.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
    write_md(out, args.out.with_suffix(".md"))


def measured(path: Path, poll_s: float = 30.0) -> dict:
    """selection_table.py's WikiText-2-validation selection, once it is written."""
    while True:
        if path.exists():
            sel = json.loads(path.read_text()).get("selections", {}).get("wikitext2_validation")
            if sel:
                return sel
        time.sleep(poll_s)


def write_md(out: dict, path: Path) -> None:
    tasks = out["tasks"]
    d = out["selection_data"]
    md = [
        f"# Method against criterion: SmolLM2-135M zero-shot accuracy, first {out['limit']} documents per task",
        "",
        f"Calibration {out['calibration']}; greedy and auto chosen on {d['path']} {d['split']} "
        f"({d['num_samples']} blocks, bench/selection_table.py); lm-eval prompts and metrics (acc / acc_norm); "
        f"`{out['command']}`; {out['machine']}; {out['total_s']:.0f} s in all.",
        "",
        "| model | layers | " + " | ".join(tasks) + " | mean acc |",
        "|---|---|" + "---|" * (len(tasks) + 1),
    ]
    for r in out["rows"]:
        cells = []
        for t in tasks:
            norm = r[t].get("acc_norm")
            cells.append(f"{r[t]['acc']:.3f}" + ("" if norm is None else f" / {norm:.3f}"))
        mean = sum(r[t]["acc"] for t in tasks) / len(tasks)
        md.append(f"| {r['name']} | {r['layers'] or '-'} | " + " | ".join(cells) + f" | {mean:.3f} |")
    path.write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
