#!/usr/bin/env python3
"""Inference speed on CPU, base vs compressed: prefill tokens/s at 512 and 2048 tokens, decode
tokens/s (KV cache on, 128 new tokens), KV-cache bytes per token, parameters and sparsity, each from
`nbl eval --speed --json` (median of --repeats after a warm-up).

    .venv/bin/python bench/speed_table.py --model BASE_DIR_OR_GGUF OUT_DIR [OUT_DIR ...] [--threads 1]

The models are measured in turns (base, out1, out2, ..., then again) so that other load on the
machine hits all alike; each figure is the median over the rounds of the per-round medians.
Writes bench/results/speed_cpu.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NBL = HERE.parent / ".venv" / "bin" / "nbl"
FIGURES = ("prefill_512", "prefill_2048", "decode")


def measure(path: str, threads: int, repeats: int) -> dict:
    p = subprocess.run(
        [
            str(NBL),
            "eval",
            "--model",
            path,
            "--base",
            "none",
            "--speed",
            "--repeats",
            str(repeats),
            "--threads",
            str(threads),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, OMP_NUM_THREADS=str(threads)),
    )
    if p.returncode != 0:
        sys.exit(f"nbl eval failed on {path}:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout)["speed"]


def figures(speed: dict) -> dict:
    pre = speed["prefill_tokens_per_s"]
    return {
        "prefill_512": pre.get("512", pre.get(512)),
        "prefill_2048": pre.get("2048", pre.get(2048)),
        "decode": speed["decode_tokens_per_s"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="the base model")
    ap.add_argument("outputs", nargs="+", help="nbl compress output directories")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "speed_cpu")
    args = ap.parse_args()

    names = {"base": args.model, **{Path(o).parent.name + "/" + Path(o).name: o for o in args.outputs}}
    rounds: dict[str, list[dict]] = {n: [] for n in names}
    last: dict[str, dict] = {}
    for r in range(args.rounds):
        for name, path in names.items():
            t = time.perf_counter()
            last[name] = measure(path, args.threads, args.repeats)
            rounds[name].append(figures(last[name]))
            print(
                f"round {r} {name}: {rounds[name][-1]} ({time.perf_counter() - t:.0f} s, load {os.getloadavg()[0]:.1f})",
                flush=True,
            )

    base_ne = last["base"]["non_embedding_params"]
    table = {}
    for name in names:
        med = {f: statistics.median(x[f] for x in rounds[name]) for f in FIGURES}
        s = last[name]
        table[name] = {
            **med,
            "kv_cache_bytes_per_token": s["kv_cache_bytes_per_token"],
            "params": s["params"],
            "non_embedding_params": s["non_embedding_params"],
            "sparsity": 1 - s["non_embedding_params"] / base_ne,
            "rounds": rounds[name],
        }
    meta = {
        "generated": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "threads": args.threads,
        "repeats": args.repeats,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "command": " ".join(sys.argv),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "models": names, "table": table}, indent=1))

    b = table["base"]
    lines = [
        "# CPU inference speed, base vs compressed (`nbl eval --speed`)",
        "",
        f"{args.threads} torch thread(s), float32, {args.rounds} rounds x median of {args.repeats} repeats after a "
        f"warm-up, models measured in turns on a {meta['cpus']}-CPU machine shared with other work. "
        f"Generated {meta['generated']}.",
        "",
        "| model | prefill 512 tok/s | prefill 2048 tok/s | decode tok/s | KV bytes/token | non-emb. params | sparsity |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, t in table.items():
        rel = "" if name == "base" else " ({:+.0%})"
        cells = [f"{t[f]:.0f}" + (rel.format(t[f] / b[f] - 1) if rel else "") for f in FIGURES]
        lines.append(
            f"| {name} | " + " | ".join(cells) + f" | {t['kv_cache_bytes_per_token']:,.0f} | "
            f"{t['non_embedding_params']:,} | {t['sparsity']:.1%} |"
        )
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
