"""Calibration on a GPU at full width (issue 12 §6): a random Llama built on the device, random token ids.

    python bench/gpu_calibration.py                          # Llama-3.1-8B shapes, 256 x 2048 tokens, bf16
    python bench/gpu_calibration.py --preset 70b --layers 4  # the per-layer cost at 70B width
    python bench/gpu_calibration.py --preset tiny --device cpu --num-samples 4 --seq-len 64   # the CPU test's run

Nothing is downloaded: the model is built on the device with random weights (the engine's cost does not depend
on their values), the blocks are random token ids. Imports torch, transformers and the engine's calibration
alone (no datasets, no service settings), so it runs on a bare GPU machine with the repository checked out.

Reported (bench/results/gpu_calibration.json): seconds per stage (build, a plain forward pass of the decoder over
the same tokens and with the same batches, calibration per product precision, scoring), peak device memory of
each, tokens/s, and calibration / forward. Products: `float32` (TF32 off) and `tf32` (torch's allow_tf32 for the
products' matmuls; no effect on a CPU). Issue 12's GPU target: 8B shapes, 256 x 2048 tokens, under 3 min on one
H200 and <= 1.5x the bf16 forward.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from worker.engine.calibration.calibrate import calibrate, holdout_count  # noqa: E402
from worker.engine.scoring.scores import score_layer  # noqa: E402

PRESETS = {  # the shapes of the published configs (no weights)
    "8b": dict(
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
    ),
    "70b": dict(
        hidden_size=8192,
        intermediate_size=28672,
        num_hidden_layers=80,
        num_attention_heads=64,
        num_key_value_heads=8,
        vocab_size=128256,
    ),
    "tiny": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
    ),
}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak(device: torch.device) -> int | None:
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


def reset(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def build(preset: str, layers: int | None, seq_len: int, dtype: torch.dtype, device: torch.device):
    from transformers import LlamaConfig, LlamaForCausalLM

    shape = dict(PRESETS[preset])
    if layers:
        shape["num_hidden_layers"] = layers
    config = LlamaConfig(**shape, max_position_embeddings=max(seq_len, 8192), tie_word_embeddings=False)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # parameters created in the model's dtype, on the device: no float32 copy
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    return model.eval(), shape


@torch.no_grad()
def forward(model, blocks: torch.Tensor, batch_size: int, device: torch.device) -> None:
    for s in range(0, len(blocks), batch_size):
        model.model(input_ids=blocks[s : s + batch_size].to(device), use_cache=False)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="8b")
    ap.add_argument("--layers", type=int, help="decoder layers (default: the preset's)")
    ap.add_argument("--num-samples", type=int, default=256)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument(
        "--batch-size",
        type=int,
        help="blocks per batch (default: nbl compress's: 16,384 tokens on a GPU, 2,048 on the CPU)",
    )
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on a GPU, float32 on the CPU")
    ap.add_argument("--products", default="float32,tf32", help="product precisions to time, comma-separated")
    ap.add_argument("--mode", choices=["attn", "block"], default="attn")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "gpu_calibration.json")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    bs = args.batch_size or max(1, (16384 if device.type == "cuda" else 2048) // args.seq_len)
    seconds: dict[str, float] = {}
    peaks: dict[str, int | None] = {}

    reset(device)
    torch.manual_seed(0)  # the same random model every run (the test calibrates it again)
    t = time.perf_counter()
    model, shape = build(args.preset, args.layers, args.seq_len, dtype, device)
    sync(device)
    seconds["build"], peaks["build"] = time.perf_counter() - t, peak(device)
    blocks = torch.randint(
        shape["vocab_size"], (args.num_samples, args.seq_len), generator=torch.Generator().manual_seed(0)
    )
    hold = holdout_count(args.num_samples)
    forward(model, blocks[:bs], bs, device)  # warm-up: kernels chosen, allocator primed
    sync(device)

    reset(device)
    t = time.perf_counter()
    forward(model, blocks, bs, device)
    sync(device)
    seconds["forward_decoder"], peaks["forward_decoder"] = time.perf_counter() - t, peak(device)

    scored: dict[str, list[float]] = {}
    for name in [p.strip() for p in args.products.split(",") if p.strip()]:
        score_s = 0.0
        bounds: list[float] = []

        def on_layer(i, stats):
            nonlocal score_s
            t0 = time.perf_counter()
            bounds.append(score_layer(stats)[args.mode].cca_bound)
            sync(device)
            score_s += time.perf_counter() - t0

        reset(device)
        t = time.perf_counter()  # tf32: the engine's own switch (products.tf32_matmuls), as --stats-precision tf32
        calibrate(
            model,
            blocks,
            bs,
            hold,
            torch.float32,
            progress=False,
            modes=(args.mode,),
            device=device,
            on_layer=on_layer,
            tf32=name == "tf32",
        )
        sync(device)
        total = time.perf_counter() - t
        seconds[f"calibrate_{name}"] = total - score_s
        seconds[f"score_{name}"] = score_s
        peaks[f"calibrate_{name}"] = peak(device)
        scored[name] = bounds

    tokens = int(blocks.numel())
    fwd = seconds["forward_decoder"]
    result = {
        "preset": args.preset,
        "shape": shape,
        "dtype": str(dtype).removeprefix("torch."),
        "mode": args.mode,
        "num_samples": args.num_samples,
        "seq_len": args.seq_len,
        "batch_size": bs,
        "tokens": tokens,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "peak_device_bytes": peaks,
        "tokens_per_s": {
            k.removeprefix("calibrate_"): round(tokens / (v + seconds[f"score_{k.removeprefix('calibrate_')}"]), 1)
            for k, v in seconds.items()
            if k.startswith("calibrate_")
        },
        "calibration_over_forward": {
            k.removeprefix("calibrate_"): round((v + seconds[f"score_{k.removeprefix('calibrate_')}"]) / fwd, 3)
            for k, v in seconds.items()
            if k.startswith("calibrate_")
        },
        "cca_bounds": scored,
        "targets": "8b, 256 x 2048: calibration + scoring < 180 s on one H200 and <= 1.5x forward_decoder",
        "torch": torch.__version__,
        "command": " ".join(["python", "bench/gpu_calibration.py", *(argv if argv is not None else sys.argv[1:])]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        json.dumps(
            {k: result[k] for k in ("device", "seconds", "peak_device_bytes", "calibration_over_forward")}, indent=2
        )
    )
    return result


if __name__ == "__main__":
    main()
