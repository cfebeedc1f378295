"""Wall time of `nbl compress` on one CPU process against two (`--devices cpu` vs `--devices cpu,cpu`).

    .venv/bin/python bench/devices_cpu.py [--layers 8] [--hidden 512] [--num-samples 32] [--seq-len 512]

Builds a random Llama (bench/memory_cpu.py's builder, SmolLM2's tokenizer) in a scratch directory and
runs, each in its own process (every calibration process keeps the thread count of one, so that its
float32 products are those of one process, bit for bit):

    nbl compress --model DIR --dataset c4 --num-samples 32 --seq-len 512 --mode attn --k 4 --no-cache --json --devices cpu
    ... --devices cpu,cpu

Records each run's wall time, calibration seconds and peak RSS (/usr/bin/time: the largest single
process's, not the sum over processes), and the largest relative difference between
the two runs' scores (they must agree to 1e-10). Two processes on the cores one process already uses
compete for them and pay for a second interpreter (torch and transformers imported, the checkpoint
opened): this measures that cost, not a speed-up; several GPUs are where the split pays.
Writes bench/results/devices_cpu.json, with the machine's load average (other work only adds time).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from memory_cpu import build_model, peak_rss  # noqa: E402


def _max_rel(a: list[dict], b: list[dict]) -> float:
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        for name, v in y["attn"].items():
            if isinstance(v, float):
                worst = max(worst, abs(x["attn"][name] - v) / max(abs(v), 1e-300))
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--intermediate", type=int, default=1536)
    ap.add_argument("--num-samples", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "devices_cpu.json")
    args = ap.parse_args()

    env = dict(os.environ)
    env.setdefault("NBL_DATA_DIR", str(HERE.parent.parent / "shared" / "data"))
    os.environ.update(env)
    work = Path(tempfile.mkdtemp(prefix="nbl-devices-"))
    try:
        model_dir = work / "model"
        weights = build_model(model_dir, args.layers, args.hidden, args.intermediate)
        nbl = str(Path(sys.executable).parent / "nbl")
        cmd = [
            nbl,
            "compress",
            "--model",
            str(model_dir),
            "--dataset",
            "c4",
            "--num-samples",
            str(args.num_samples),
            "--seq-len",
            str(args.seq_len),
            "--mode",
            "attn",
            "--k",
            "4",
            "--no-cache",
            "--json",
        ]
        runs, load_before = {}, os.getloadavg()
        for devices in ("cpu", "cpu,cpu"):
            peak, seconds, out = peak_rss([*cmd, "--devices", devices], {**env, "NBL_HOME": str(work / "home")})
            report = json.loads(out)
            runs[devices] = {
                "wall_s": round(seconds, 1),
                "calibrate_s": round(report["timings"]["calibrate_s"], 1),
                "peak_rss_bytes": peak,
                "scores": report["scores"],
            }
        result = {
            "command": " ".join(["nbl", *cmd[1:], "--devices", "cpu|cpu,cpu"]),
            "model": {
                "layers": args.layers,
                "hidden": args.hidden,
                "intermediate": args.intermediate,
                "dtype": "float32",
                "weights_bytes": weights,
            },
            "tokens": args.num_samples * args.seq_len,
            "runs": {d: {k: v for k, v in r.items() if k != "scores"} for d, r in runs.items()},
            "scores_max_relative_difference": _max_rel(runs["cpu,cpu"]["scores"], runs["cpu"]["scores"]),
            "load_average_before_after": [list(load_before), list(os.getloadavg())],
            "cpus": os.cpu_count(),
            "machine": platform.platform(),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
