#!/usr/bin/env python3
"""vLLM on CPU, fp32, base vs compressed (the nbl-vllm plugin): prefill and decode tokens/s at batch 1
and 8, and the KV-cache capacity in tokens at a fixed cache size (VLLM_CPU_KVCACHE_SPACE GiB).

    make serving-env
    .venv/bin/nbl compress --model SMOLLM2.gguf --k 4,8 --out bench/out/attn-nbl ...
    .venv/bin/nbl compress --model SMOLLM2.gguf --k 4 --method drop --out bench/out/attn-drop ...
    .venv-vllm/bin/python bench/vllm_cpu.py --model BASE_DIR bench/out/attn-nbl/k4 bench/out/attn-nbl/k8 \\
        bench/out/attn-drop

One engine at a time, in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), eager (--eager, the
default here: graph capture takes minutes per model on 2 cores). Prompts are random token ids.
    prefill  B prompts of --prompt-len tokens, 1 new token: B * prompt_len / time
    decode   B prompts of 16 tokens: B * (N - 1) / (time of N new tokens - time of 1), N = --new-tokens
Each figure is the median of --repeats after one warm-up. Writes bench/results/vllm_cpu.{json,md}.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BATCHES = (1, 8)


def _timed(llm, prompts, new_tokens: int) -> float:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True)
    t = time.perf_counter()
    llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    return time.perf_counter() - t


def measure(path: str, args) -> dict:
    from vllm import LLM

    t0 = time.perf_counter()
    llm = LLM(
        model=path,
        dtype="float32",
        max_model_len=args.prompt_len + args.new_tokens + 16,
        seed=0,
        enforce_eager=args.eager,
        distributed_executor_backend="uni",
        generation_config="vllm",
    )
    start_s = time.perf_counter() - t0
    try:
        rng = random.Random(0)
        vocab = llm.llm_engine.model_config.get_vocab_size()
        ids = lambda n, b: [[rng.randrange(100, vocab) for _ in range(n)] for _ in range(b)]  # noqa: E731
        cache = llm.llm_engine.vllm_config.cache_config
        out = {"kv_cache_tokens": cache.num_gpu_blocks * cache.block_size, "engine_start_s": round(start_s, 1)}
        for b in BATCHES:
            _timed(llm, ids(args.prompt_len, b), 1)  # warm-up
            pre = [_timed(llm, ids(args.prompt_len, b), 1) for _ in range(args.repeats)]
            one = [_timed(llm, ids(16, b), 1) for _ in range(args.repeats)]
            full = [_timed(llm, ids(16, b), args.new_tokens) for _ in range(args.repeats)]
            out[f"prefill_b{b}"] = b * args.prompt_len / statistics.median(pre)
            out[f"decode_b{b}"] = b * (args.new_tokens - 1) / (statistics.median(full) - statistics.median(one))
        return out
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()


def table(results: dict, args) -> str:
    base = results["base"]
    cols = [f"prefill_b{b}" for b in BATCHES] + [f"decode_b{b}" for b in BATCHES]
    head = (
        "| model | layers replaced | "
        + " | ".join(c.replace("_b", " tok/s, batch ") for c in cols)
        + f" | KV cache tokens ({args.kv_gib} GiB) | vs base |"
    )
    rows = [head, "|" + "---|" * (len(cols) + 4)]
    for name, r in results.items():
        figs = " | ".join(f"{r[c]:.1f}" for c in cols)
        rows.append(
            f"| {name} | {r.get('layers', '-')} | {figs} | {r['kv_cache_tokens']:,} | "
            f"{r['kv_cache_tokens'] / base['kv_cache_tokens']:.3f}x |"
        )
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="the base model directory")
    ap.add_argument("outputs", nargs="+", help="nbl compress output directories")
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--eager", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--kv-gib", type=int, default=1)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "vllm_cpu")
    args = ap.parse_args()
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(args.kv_gib)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"

    import vllm

    results: dict[str, dict] = {}
    for path in [args.model, *args.outputs]:
        cfg = json.loads((Path(path) / "config.json").read_text())
        plan = cfg.get("nbl")
        name = "base" if plan is None else f"{plan['mode'].capitalize()} {plan['method'].upper()}-{len(plan['layers'])}"
        results[name] = {**measure(path, args), **({"layers": plan["layers"]} if plan else {})}
        print(name, json.dumps(results[name]), flush=True)

    load = os.getloadavg()
    meta = {
        "vllm": vllm.__version__,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "loadavg_at_end": [round(x, 2) for x in load],
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "repeats": args.repeats,
        "eager": args.eager,
        "kv_gib": args.kv_gib,
        "omp_threads_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto"),
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    md = (
        f"# vLLM on CPU: SmolLM2-135M base vs Attn NBL / Attn DROP (fp32)\n\n"
        f"vLLM {meta['vllm']} (vllm-cpu) with the nbl-vllm plugin, {meta['cpus']} CPUs ({meta['machine']}), "
        f"{'eager' if args.eager else 'compiled'}, one engine at a time; vLLM binds its OpenMP threads "
        f"(VLLM_CPU_OMP_THREADS_BIND={meta['omp_threads_bind']}: 1 thread on this 2-core machine). Prefill: prompts of {args.prompt_len} random tokens, 1 new "
        f"token. Decode: {args.new_tokens} new tokens after 16-token prompts, the 1-token run subtracted. "
        f"Medians of {args.repeats} after a warm-up. KV cache: VLLM_CPU_KVCACHE_SPACE={args.kv_gib} GiB. "
        f"Load average at the end {meta['loadavg_at_end']} (the machine was shared with other work: "
        f"absolute figures are pessimistic, compare rows). Generated {meta['generated']} by "
        f"`bench/vllm_cpu.py`.\n\n{table(results, args)}\n\n"
        "GPU: not measured (no GPU with a vLLM build was available in this session).\n"
    )
    args.out.with_suffix(".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
