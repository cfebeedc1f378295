"""How long writing a compressed output takes (worker/engine/forms/saving.write_compressed, the compress stage's
write): SmolLM2 (its GGUF converted to float32 safetensors, 538 MB) with attn NBL on 8 layers, written in
float32 (most tensors copied file to file: shard_writer.copy_span) and in bfloat16 (every tensor loaded
and cast), `--repeats` times each after an os.sync().

    NBL_DATA_DIR=... .venv/bin/python bench/write_output.py [--repeats 5] [--out bench/results/write_output.json]

Prints and writes wall and CPU seconds per write, with the commit and the load average (other work only adds time).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/write_output.json")
    args = ap.parse_args()
    load = os.getloadavg()

    import torch
    from testkit.models import load_smollm2
    from transformers import AutoTokenizer

    from worker.engine.forms.saving import write_compressed
    from worker.engine.scoring.scores import LinearMap

    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch) / "home"
        load_smollm2(home)
        base = next((home / "models").iterdir())
        d, layers = 576, list(range(10, 18))
        g = torch.Generator().manual_seed(0)
        maps = {
            i: LinearMap(
                torch.randn(d, d, generator=g, dtype=torch.float64) / d,
                torch.randn(d, generator=g, dtype=torch.float64),
                0.0,
            )
            for i in layers
        }
        plan = {"mode": "attn", "method": "nbl", "layers": layers}
        tokenizer = AutoTokenizer.from_pretrained(base)
        rows = {}
        for dtype in (torch.float32, torch.bfloat16):
            walls, cpus = [], []
            for _ in range(args.repeats):
                out = Path(scratch) / "out"
                shutil.rmtree(out, ignore_errors=True)
                os.sync()
                t, c = time.perf_counter(), time.process_time()
                write_compressed(
                    base, plan, maps, dtype, tokenizer, out, "llama", {"layers": [], "replaced_layers": layers}
                )
                walls.append(round(time.perf_counter() - t, 3))
                cpus.append(round(time.process_time() - c, 3))
            rows[str(dtype).split(".")[1]] = {
                "wall_s": walls,
                "cpu_s": cpus,
                "bytes": sum(f.stat().st_size for f in out.glob("*.safetensors")),
            }
            print(f"{dtype}: wall {walls} s, cpu {cpus} s")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    report = {
        "command": "bench/write_output.py --repeats %d" % args.repeats,
        "commit": commit.strip(),
        "dirty": bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--", "worker"], cwd=ROOT, capture_output=True, text=True
            ).stdout
        ),
        "load_average_before": load,
        "writes": rows,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
