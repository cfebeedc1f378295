"""A quantized output (nbl compress --quantize) served by stock vLLM CPU, no plugin, against transformers on the
same checkpoint: greedy agreement on 3 prompts x 32 tokens (issue 39 item 5), and the unquantized output's tokens
in vLLM beside them. Runs in the serving venv (vLLM and its compressed-tensors, which transformers also loads).

    VLLM_PLUGINS= .venv-vllm/bin/python bench/quant_serve.py --quantized OUT/w4a16 --plain OUT --name NAME

A fold attn output is a DeciLM: vLLM runs its own nemotron_nas class, with trust_remote_code for our config class
(transformers has none), and transformers runs the modeling_decilm.py shipped with it.

Writes bench/results/quant_serve_NAME.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Photosynthesis is the process by which"]
NEW = 32


def remote(path: str) -> bool:
    """A DeciLM (fold attn): its config class is the shipped file's."""
    return json.loads((Path(path) / "config.json").read_text()).get("model_type") == "nemotron-nas"


def vllm_tokens(path: str, ids: list[list[int]]) -> list[list[int]]:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(
        model=path,
        dtype="bfloat16",
        max_model_len=512,
        seed=0,
        enforce_eager=True,
        generation_config="vllm",
        trust_remote_code=remote(path),
    )
    params = SamplingParams(temperature=0.0, max_tokens=NEW, ignore_eos=True)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in ids], params, use_tqdm=False)
    llm.llm_engine.engine_core.shutdown()
    return [list(o.outputs[0].token_ids) for o in outs]


def hf_tokens(path: str, ids: list[list[int]]) -> list[list[int]]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, trust_remote_code=remote(path)).eval()
    out = []
    for p in ids:
        x = torch.tensor([p])
        g = model.generate(x, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
        out.append(g[0, len(p) :].tolist())
    return out


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    """The share of positions, prompt by prompt, before the first token where the two differ."""
    same = 0
    for x, y in zip(a, b):
        n = next((i for i, (s, t) in enumerate(zip(x, y)) if s != t), len(x))
        same += n
    return same / sum(len(x) for x in a)


def main() -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM would take most of the machine
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quantized", required=True)
    ap.add_argument("--plain", required=True)
    ap.add_argument("--name", required=True)
    a = ap.parse_args()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(a.quantized)
    ids = [tok(p)["input_ids"] for p in PROMPTS]
    t = time.time()
    got = {
        "vllm_quantized": vllm_tokens(a.quantized, ids),
        "vllm_plain": vllm_tokens(a.plain, ids),
        "transformers_quantized": hf_tokens(a.quantized, ids),
    }
    facts = json.loads((Path(a.quantized) / "quantization.json").read_text())
    size = {
        k: sum(f.stat().st_size for f in Path(p).glob("*.safetensors"))
        for k, p in (("quantized", a.quantized), ("plain", a.plain))
    }
    res = {
        "quantization": facts,
        "bytes": size,
        "agreement": {
            "vllm_quantized_vs_transformers_quantized": agreement(got["vllm_quantized"], got["transformers_quantized"]),
            "vllm_quantized_vs_vllm_plain": agreement(got["vllm_quantized"], got["vllm_plain"]),
        },
        "text": {k: [tok.decode(x) for x in v] for k, v in got.items()},
        "seconds": round(time.time() - t, 1),
    }
    out = HERE / "results" / f"quant_serve_{a.name}"
    out.with_suffix(".json").write_text(json.dumps(res, indent=2) + "\n")
    lines = [
        f"# {a.name}: {facts['preset']} in stock vLLM CPU (no plugin) against transformers",
        "",
        f"Quantized by llm-compressor {facts['llmcompressor']} ({facts['method']}, group {facts['group_size']}, "
        f"{facts['calibration_tokens']:,} calibration tokens; unquantized: {', '.join(facts['unquantized'])}). "
        f"Weights {size['quantized'] / 1e6:,.1f} MB quantized, {size['plain'] / 1e6:,.1f} MB as written before. "
        f"Greedy, {len(PROMPTS)} prompts x {NEW} tokens, bfloat16 activations; agreement = the share of tokens "
        "before the first difference.",
        "",
        "| pair | agreement |",
        "|---|---:|",
        *(f"| {k.replace('_', ' ')} | {v:.1%} |" for k, v in res["agreement"].items()),
        "",
        "| prompt | vLLM, quantized | vLLM, unquantized | transformers, quantized |",  # the order of `got`
        "|---|---|---|---|",
        *(
            "| "
            + " | ".join(x.replace("\n", " ").replace("|", "\\|") for x in (p, *(res["text"][k][i] for k in got)))
            + " |"
            for i, p in enumerate(PROMPTS)
        ),
        "",
        f"Command: `VLLM_PLUGINS= .venv-vllm/bin/python bench/quant_serve.py --quantized {a.quantized} --plain {a.plain} --name {a.name}`",
        "",
    ]
    out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
