#!/usr/bin/env python3
"""The token comparison table of the vLLM tests, written to a file: vLLM (nbl-vllm plugin) against
transformers on the outputs of tests/serving/plan.py, 3 prompts x 16 greedy tokens in fp32.

    NBL_SERVING_WORK=DIR make test-serving          # makes DIR/reference.json (transformers side)
    .venv-vllm/bin/python bench/vllm_parity.py DIR  # -> bench/results/vllm_parity.{json,md}

Runs in the serving venv, with the same engine settings as the tests (tests/serving/vllm_run.py).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "serving"))
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from plan import kv_cache_tokens  # noqa: E402
from vllm_run import run_all  # noqa: E402


def row(name: str, ref: dict, got: dict) -> dict:
    if "error" in got:
        return {"output": name, "error": got["error"].splitlines()[-1]}
    pairs = [(a, b) for ta, tb in zip(got["tokens"], ref["tokens"]) for a, b in zip(ta, tb)]
    diffs = [abs(a - b) for la, lb in zip(got["logprobs"], ref["logprobs"]) for a, b in zip(la, lb)]
    nbl = ref["nbl"]
    return {
        "output": name,
        "mode": nbl.get("mode"),
        "method": nbl.get("method"),
        "layers": nbl.get("layers", []),
        "tokens_equal": sum(a == b for a, b in pairs),
        "tokens": len(pairs),
        "max_abs_logprob_diff": max(diffs),
        "kv_cache_tokens": got["kv_cache_tokens"],
        "kv_expected": kv_cache_tokens(ref["attention_layers"], ref["kv_bytes_per_token_layer"], got["block_size"]),
        "attention_layers": f"{ref['attention_layers']}/{ref['num_layers']}",
    }


def main() -> int:
    work = Path(sys.argv[1])
    reference = json.loads((work / "reference.json").read_text())
    t0 = time.time()
    rows = [row(n, reference[n], g) for n, g in run_all(reference).items()]
    out = HERE / "results"
    (out / "vllm_parity.json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = [
        "# vLLM vs transformers: 3 prompts x 16 greedy tokens, fp32",
        "",
        f"`.venv-vllm/bin/python bench/vllm_parity.py DIR` ({time.time() - t0:.0f} s, load "
        f"{os.getloadavg()[0]:.1f}); DIR from `NBL_SERVING_WORK=DIR make test-serving`. KV cache 1 GiB.",
        "",
        "| output | mode / method | layers replaced | tokens identical | max abs logprob diff | "
        "KV-cache tokens (expected) | attention layers |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['output']} | error: {r['error']} |||||")
            continue
        lines.append(
            f"| {r['output']} | {r['mode'] or '-'} / {r['method'] or '-'} | {r['layers'] or '-'} | "
            f"{r['tokens_equal']}/{r['tokens']} | {r['max_abs_logprob_diff']:.1e} | "
            f"{r['kv_cache_tokens']:,} ({r['kv_expected']:,}) | {r['attention_layers']} |"
        )
    (out / "vllm_parity.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
