"""Peak host memory per stage on a large-vocabulary model against `nbl estimate` (issue 37, item 6).

    .venv/bin/python bench/memory_vocab.py [--num-samples 16] [--seq-len 128] [--selection-samples 16] [--auto-samples 4] [--k 2]
        [--greedy-width 2] [--eval-tokens 2048] [--limit-gb 12] [--stages calibrate,greedy,auto_k,loss,evaluate]
        [--engine DIR] [--out bench/results/memory_vocab]

A random model of the Qwen2.5-0.5B shape (Qwen2, 24 layers, d=896, 14 heads / 2 KV heads, d_ff 4,864, vocab
151,936, untied, float32: 2.5 GB of weights; SmolLM2's tokenizer, so token ids stay below 49,152 while the
logits span the whole vocabulary) is built from a config into a scratch directory. Each stage then runs in a
fresh process (calibration first, which fills the statistics cache the later stages read, so each later
process's peak is its own stage's):

    calibrate  nbl compress --criterion cca                     calibration and scores
    greedy     nbl compress --criterion greedy --selection-dataset wikitext2 (validation)
    auto_k     nbl compress --criterion cca --k auto --max-ppl-increase 0.5 (on the same selection data)
    loss       nbl compress --criterion loss                     the loss probe over the held-out blocks
    evaluate   nbl eval --perplexity wikitext2 --max-tokens N   one whole model's perplexity
    refit      nbl compress --refit sequential                  a second pass on the compressed model's activations
    heal       nbl compress --heal-tokens N --heal-steps 2       the whole model's forward and backward, its head's too

Its peak is the larger of /usr/bin/time's maximum RSS and the process tree's RSS sampled every 50 ms; a watchdog
kills the tree past --limit-gb (the stage is then reported as killed at that size). Each is compared with
`nbl estimate --devices cpu` for the same options: the stage's phase and the job's peak. `--engine DIR` runs the
stages with another checkout's code first on the path (the figures before a change). Writes OUT.json and OUT.md.
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
import threading
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

QWEN_05B = dict(
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    vocab_size=151936,
    max_position_embeddings=32768,
    tie_word_embeddings=False,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
)
PHASE = {
    "calibrate": "calibrate",
    "greedy": "select",
    "auto_k": "select",
    "loss": "calibrate",
    "evaluate": "evaluate",
    "refit": "calibrate",  # refit is a second calibration pass over the compressed model's own activations
    "heal": "refine",
}


def build_model(path: Path) -> int:
    """The random Qwen2.5-0.5B-shaped model at `path`, float32 safetensors; returns its weights' bytes."""
    import torch
    from memory_cpu import smollm2_dir
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tok = AutoTokenizer.from_pretrained(smollm2_dir(Path(os.environ["NBL_HOME"])))
    cfg = Qwen2Config(**QWEN_05B, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    Qwen2ForCausalLM(cfg).to(torch.float32).save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return sum(f.stat().st_size for f in path.glob("*.safetensors"))


def stage_flags(stage: str, args) -> list[str]:
    """The flags of `nbl compress` (and so of `nbl estimate`) for one stage."""
    base = ["--dataset", "c4", "--num-samples", str(args.num_samples), "--seq-len", str(args.seq_len)]
    base += ["--mode", "attn"]
    selection = ["--selection-dataset", "wikitext2", "--selection-split", "validation"]
    selection += ["--selection-samples", str(args.auto_samples if stage == "auto_k" else args.selection_samples)]
    if stage == "greedy":
        return (
            base + ["--criterion", "greedy", "--k", str(args.k), "--greedy-width", str(args.greedy_width)] + selection
        )
    if stage == "auto_k":
        return base + ["--criterion", "cca", "--k", "auto", "--max-ppl-increase", "0.5"] + selection
    if stage == "loss":
        return base + ["--criterion", "loss", "--k", str(args.k)]
    if stage == "refit":
        return base + ["--criterion", "cca", "--k", str(args.k), "--refit", "sequential"]
    if stage == "heal":  # the whole model's forward and backward through the head, a few optimiser steps
        return base + [
            "--criterion",
            "cca",
            "--k",
            str(args.k),
            "--heal-tokens",
            str(args.heal_tokens),
            "--heal-steps",
            "2",
        ]
    if stage == "evaluate":  # the job's evaluation phase: one whole model's perplexity
        return base + ["--k", str(args.k), "--eval", "--perplexity", "wikitext2", "--max-tokens", str(args.eval_tokens)]
    return base + ["--criterion", "cca", "--k", str(args.k)]


def command(stage: str, model: Path, args) -> list[str]:
    nbl = str(Path(sys.executable).parent / "nbl")
    if stage == "evaluate":
        return [nbl, "eval", "--model", str(model), "--base", "none", "--perplexity", "wikitext2"] + [
            "--max-tokens",
            str(args.eval_tokens),
            "--no-cache",
            "--json",
        ]
    return [nbl, "compress", "--model", str(model), *stage_flags(stage, args), "--json"]


def watched(cmd: list[str], env: dict, limit: int) -> dict:
    """Run `cmd` under /usr/bin/time; sample its tree's RSS every 50 ms, killing the tree past `limit` bytes."""
    with tempfile.NamedTemporaryFile("r") as rss, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        proc = subprocess.Popen(["/usr/bin/time", "-o", rss.name, "-f", "%M", *cmd], env=env, stdout=out, stderr=err)
        peak, killed, done = 0, False, threading.Event()

        def sample():
            nonlocal peak, killed
            root = psutil.Process(proc.pid)
            while not done.is_set():
                try:
                    tree = [root, *root.children(recursive=True)]
                    total = sum(p.memory_info().rss for p in tree if p.is_running())
                except psutil.Error:
                    total = 0
                peak = max(peak, total)
                if total > limit and not killed:
                    killed = True
                    for p in reversed(tree):
                        try:
                            p.kill()
                        except psutil.Error:
                            pass
                time.sleep(0.05)

        watcher = threading.Thread(target=sample, daemon=True)
        watcher.start()
        code = proc.wait()
        done.set()
        watcher.join()
        seconds = time.perf_counter() - t
        lines = open(rss.name).read().split()
        kib = int(lines[-1]) if lines and lines[-1].isdigit() else 0
        err.seek(0)
        tail = err.read().decode(errors="replace")[-2000:]
    return {
        "peak_rss_bytes": max(peak, kib * 1024),
        "time_max_rss_bytes": kib * 1024,
        "sampled_tree_peak_bytes": peak,
        "killed_at_limit": killed,
        "exit_code": code,
        "wall_s": round(seconds, 1),
        **({"stderr_tail": tail} if code != 0 else {}),
    }


def estimated(stage: str, model: Path, args, env: dict) -> dict:
    nbl = str(Path(sys.executable).parent / "nbl")
    cmd = [nbl, "estimate", "--model", str(model), *stage_flags(stage, args), "--devices", "cpu", "--json"]
    est = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)
    return {
        "phase": PHASE[stage],
        "phase_host_bytes": est["phases"][PHASE[stage]]["host"],
        "job_host_bytes": est["host_bytes"],
    }


# The run the kernel killed at 22.3 GB (issue 37): its options, estimated as the stages here are
OOM_RUN = "--dataset c4 --num-samples 32 --seq-len 256 --mode attn --k 6 --criterion greedy --selection-samples 16"
OOM_RUN += " --selection-dataset wikitext2 --selection-split validation"
CUTS = (
    "Cut to fit a 2-core machine shared with other work (each stage a few minutes): calibration 16 x 128 tokens "
    "(the killed run: 32 x 256); greedy k=2, width 2 (5 sets; the killed run k=6, width 8: 49) on 16 selection "
    "blocks of 128 tokens, one 2,048-token batch as the killed run's 8 x 256; k auto on 4 selection blocks; "
    "evaluation one 2,048-token window. More sets add prefix-cache entries (one selection set's states each, "
    "7.3 MB here), which the estimate counts; `nbl estimate` gives the killed run's options {oom:.2f} GB."
)


def write_markdown(result: dict, path: Path) -> None:
    gb = 1e9
    lines = [
        "# Peak host memory per stage, Qwen2.5-0.5B shape (vocab 151,936), against `nbl estimate`",
        "",
        f"`{result['command']}` (code {result['code']}, {result['cpus']} CPUs, load {result['load_average_before']}).",
        "",
        "| stage | command | peak RSS | estimate (phase) | within | job estimate | wall |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in result["stages"].items():
        peak = (
            f"killed at {r['peak_rss_bytes'] / gb:.2f} GB"
            if r["killed_at_limit"]
            else f"{r['peak_rss_bytes'] / gb:.2f} GB"
        )
        if r["exit_code"] and not r["killed_at_limit"]:
            peak += f" (exit {r['exit_code']})"
        e = r["estimate"]
        lines.append(
            f"| {name} | `{r['command']}` | {peak} | {e['phase_host_bytes'] / gb:.2f} GB ({e['phase']}) | "
            f"{'yes' if r['within_estimate'] else 'NO'} | {e['job_host_bytes'] / gb:.2f} GB | {r['wall_s']:.0f} s |"
        )
    lines += ["", result["notes"], "", CUTS.format(oom=result["oom_run_estimate_host_bytes"] / gb), ""]
    path.write_text("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-samples", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--selection-samples", type=int, default=16)
    ap.add_argument("--auto-samples", type=int, default=4, help="selection blocks of the k auto stage")
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--greedy-width", type=int, default=2)
    ap.add_argument("--eval-tokens", type=int, default=2048)
    ap.add_argument("--heal-tokens", type=int, default=1024, help="the heal stage's training tokens")
    ap.add_argument("--limit-gb", type=float, default=12.0)
    ap.add_argument("--stages", default="calibrate,greedy,auto_k,loss,evaluate")
    ap.add_argument("--engine", type=Path, help="run the stages with this checkout's code (default: this one)")
    ap.add_argument("--work", type=Path, help="scratch directory, kept (default: a temporary one, removed)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "memory_vocab")
    args = ap.parse_args()

    work = args.work or Path(tempfile.mkdtemp(prefix="nbl-vocab-"))
    env = dict(os.environ, NBL_HOME=str(work / "home"), PYTHONPATH=str(args.engine or REPO))
    env.setdefault("NBL_DATA_DIR", str(REPO.parent / "shared" / "data"))
    os.environ.update(env)
    sys.path.insert(0, str(HERE))
    try:
        model = work / "model"
        if not (model / "config.json").is_file():
            build_model(model)
        weights = sum(f.stat().st_size for f in model.glob("*.safetensors"))
        load_before = [round(x, 1) for x in os.getloadavg()]
        stages = {}
        for stage in args.stages.split(","):
            cmd = command(stage, model, args)
            print(f"{stage}: {' '.join(cmd[1:])}", flush=True)
            r = watched(cmd, env, int(args.limit_gb * 1e9))
            r["command"] = " ".join(["nbl", *cmd[1:]]).replace(str(model), "MODEL")
            r["estimate"] = estimated(stage, model, args, dict(env, PYTHONPATH=str(REPO)))
            r["within_estimate"] = r["exit_code"] == 0 and r["peak_rss_bytes"] <= r["estimate"]["phase_host_bytes"]
            stages[stage] = r
            print(json.dumps({k: v for k, v in r.items() if k != "stderr_tail"}), flush=True)
        nbl = str(Path(sys.executable).parent / "nbl")
        oom = [nbl, "estimate", "--model", str(model), *OOM_RUN.split(), "--devices", "cpu", "--json"]
        oom_est = json.loads(
            subprocess.run(oom, env=dict(env, PYTHONPATH=str(REPO)), check=True, capture_output=True).stdout
        )
        flags = [f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k not in ("work", "out") and v]
        result = {
            "command": "bench/memory_vocab.py " + " ".join(flags),
            "model": {**QWEN_05B, "family": "qwen2", "dtype": "float32", "weights_bytes": weights},
            "engine": str(args.engine or "this checkout"),
            "code": subprocess.run(
                ["git", "-C", str(args.engine or REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
            ).stdout.strip()
            or str(args.engine),  # an exported tree (git archive) names its commit in its path
            "stages": stages,
            "oom_run_estimate_host_bytes": oom_est["host_bytes"],
            "limit_bytes": int(args.limit_gb * 1e9),
            "load_average_before": load_before,
            "load_average_after": [round(x, 1) for x in os.getloadavg()],
            "cpus": os.cpu_count(),
            "machine": platform.platform(),
            "notes": (
                "Peak: max(/usr/bin/time's max RSS, the process tree's RSS sampled every 50 ms). Estimate: "
                "`nbl estimate --devices cpu` with the stage's flags (this checkout's sizing), its phase's host "
                "bytes (within: the peak at or below it) and the job's peak over every phase."
            ),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
        write_markdown(result, args.out.with_suffix(".md"))
        print(args.out.with_suffix(".md").read_text())
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
