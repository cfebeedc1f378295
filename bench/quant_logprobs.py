"""Teacher-forced log-probabilities of the same WikiText-2 tokens through stock vLLM CPU (no plugin) and transformers,
on each checkpoint given (issue 39: is the low greedy agreement of quantized copies a serving defect, or greedy
decoding's fragility?). Greedy agreement counts tokens before the first difference, so one near-tie ends it; this
scores every position of fixed text on both sides instead.

    VLLM_PLUGINS= .venv-vllm/bin/python bench/quant_logprobs.py --model NAME=PATH [--model NAME=PATH ...] --out FILE

Sides, per checkpoint: vLLM in bfloat16 (what a deployment serves), transformers in bfloat16, and transformers in
float32 (the checkpoint's weights decompressed without rounding to 16 bits: the reference). For each pair: the
perplexity each side gives the text, the mean and the largest |difference| of a token's log-probability, the share of
positions where both sides' top token is the same, and the share of positions the reference calls near-ties (its top
two within 0.1 nats), where a greedy path may turn on noise alone.

Writes FILE.json and FILE.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

DATA = Path(os.environ.get("NBL_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))
TOPK = 5
TIE = 0.1  # nats: a reference position whose top two are closer than this is a near-tie


def remote(path: str) -> bool:
    """A DeciLM (fold attn): its config class is the shipped file's."""
    return json.loads((Path(path) / "config.json").read_text()).get("model_type") == "nemotron-nas"


def windows(path: str, n: int, length: int) -> list[list[int]]:
    """n windows of `length` tokens from the start of WikiText-2 test, each opened with BOS where the tokenizer
    opens text with it."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    ids = tok((DATA / "wikitext-2" / "wiki.test.raw").read_text()[:400_000], add_special_tokens=False)["input_ids"]
    bos = (
        tok("a")["input_ids"][:1]
        if tok.bos_token_id is not None and tok("a")["input_ids"][0] == tok.bos_token_id
        else []
    )
    step = length - len(bos)
    return [bos + ids[i * step : (i + 1) * step] for i in range(n)]


def vllm_side(path: str, wins: list[list[int]]) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(
        model=path,
        dtype="bfloat16",
        max_model_len=max(map(len, wins)) + 8,
        seed=0,
        enforce_eager=True,
        generation_config="vllm",
        trust_remote_code=remote(path),
    )
    params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=TOPK)
    outs = llm.generate([TokensPrompt(prompt_token_ids=w) for w in wins], params, use_tqdm=False)
    llm.llm_engine.engine_core.shutdown()
    lp, top = [], []
    for w, o in zip(wins, outs):
        for i in range(1, len(w)):
            d = o.prompt_logprobs[i]
            lp.append(d[w[i]].logprob)
            top.append(next(t for t, x in d.items() if x.rank == 1))
    return {"lp": lp, "top": top}


def hf_side(path: str, wins: list[list[int]], dtype: str) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=getattr(torch, dtype), trust_remote_code=remote(path)
    ).eval()
    lp, top, gap = [], [], []
    with torch.no_grad():
        for w in wins:
            x = torch.tensor([w])
            logp = torch.log_softmax(model(x).logits[0, :-1].float(), -1)
            lp += logp.gather(1, x[0, 1:, None])[:, 0].tolist()
            two = logp.topk(2, -1)
            top += two.indices[:, 0].tolist()
            gap += (two.values[:, 0] - two.values[:, 1]).tolist()
    return {"lp": lp, "top": top, "gap": gap}


def compare(a: dict, b: dict, ref: dict) -> dict:
    d = [abs(x - y) for x, y in zip(a["lp"], b["lp"])]
    same = [s == t for s, t in zip(a["top"], b["top"])]
    ties = [g < TIE for g in ref["gap"]]
    flips = [not s for s in same]
    return {
        "mean_abs_dlogp": sum(d) / len(d),
        "max_abs_dlogp": max(d),
        "top1_same": sum(same) / len(same),
        "top1_differ_at_near_ties": sum(f and t for f, t in zip(flips, ties)) / max(1, sum(flips)),
    }


def ppl(side: dict) -> float:
    return math.exp(-sum(side["lp"]) / len(side["lp"]))


def main() -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM would take most of the machine
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", required=True, help="NAME=PATH, repeatable")
    ap.add_argument("--out", required=True, help="result path without suffix")
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--length", type=int, default=256)
    a = ap.parse_args()
    rows, t = [], time.time()
    for spec in a.model:
        name, path = spec.split("=", 1)
        wins = windows(path, a.windows, a.length)
        sides = {"vllm-bf16": vllm_side(path, wins), "hf-bf16": hf_side(path, wins, "bfloat16")}
        sides["hf-fp32"] = hf_side(path, wins, "float32")
        ref = sides["hf-fp32"]
        row = {
            "model": name,
            "path": path,
            "tokens": len(ref["lp"]),
            "near_ties": sum(g < TIE for g in ref["gap"]) / len(ref["gap"]),
            "ppl": {k: ppl(v) for k, v in sides.items()},
            "pairs": {
                "vllm-bf16 vs hf-fp32": compare(sides["vllm-bf16"], ref, ref),
                "hf-bf16 vs hf-fp32": compare(sides["hf-bf16"], ref, ref),
                "vllm-bf16 vs hf-bf16": compare(sides["vllm-bf16"], sides["hf-bf16"], ref),
            },
        }
        rows.append(row)
        print(json.dumps(row, indent=1), flush=True)
    out = Path(a.out)
    out.with_suffix(".json").write_text(
        json.dumps({"rows": rows, "seconds": round(time.time() - t, 1)}, indent=2) + "\n"
    )
    lines = [
        "# Teacher-forced log-probabilities: stock vLLM CPU against transformers on the same checkpoints",
        "",
        f"{a.windows} WikiText-2 test windows x {a.length} tokens, scored position by position on each side (vLLM "
        f"`prompt_logprobs`, top {TOPK}). Reference: transformers in float32. A near-tie: the reference's top two "
        f"within {TIE} nats.",
        "",
        "| checkpoint | ppl vLLM bf16 | ppl HF bf16 | ppl HF fp32 | pair | mean abs dlogp | max abs dlogp | same top-1 "
        "| differing top-1 at near-ties |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        for pair, c in r["pairs"].items():
            p = r["ppl"]
            lines.append(
                f"| {r['model']} | {p['vllm-bf16']:.2f} | {p['hf-bf16']:.2f} | {p['hf-fp32']:.2f} | {pair} "
                f"| {c['mean_abs_dlogp']:.4f} | {c['max_abs_dlogp']:.3f} | {c['top1_same']:.1%} "
                f"| {c['top1_differ_at_near_ties']:.0%} |"
            )
    lines += [
        "",
        "Command: `VLLM_PLUGINS= .venv-vllm/bin/python bench/quant_logprobs.py "
        + " ".join(f"--model {m}" for m in a.model)
        + f" --out {a.out}`",
        "",
    ]
    out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
