"""Runs in the quantization venv (.venv-quant, `make quant-env`), never in the worker's: one checkpoint directory
to a compressed-tensors checkpoint that vLLM loads with no code of ours, by llm-compressor's `oneshot`.

    python quantize.py MODEL_DIR OUT_DIR PRESET [--gptq --ids IDS.json [--smoothquant S]] [--group N]
                       [--ignore PATTERN ...] [--trust-remote-code]

PRESET is compressed-tensors' preset (FP8_DYNAMIC, W8A8, W4A16: nbl/outputs/quant_schemes.py names ours); --gptq
fits the weights by GPTQ on the token blocks of IDS.json (a list of lists of ids, the job's own calibration
blocks), after SmoothQuant at strength S when asked (W8A8: it moves activation outliers into the weights), else
round-to-nearest with no data. --group sets W4A16's group size (the caller picks one that divides
every input width). The checkpoint is read with trust_remote_code=False, so only a transformers class loads
(the fold block form is the base's own), unless --trust-remote-code: a fold attn output's DeciLM, whose
modeling_decilm.py the caller has checked is ours (worker/quant/quantize.py); the tokenizer never runs code. The last line printed is a JSON object of what was done: the scheme,
the libraries' versions, the calibration tokens, the modules left unquantized.
"""

from __future__ import annotations

import argparse
import json
import shutil
from importlib.metadata import version
from pathlib import Path


def scheme(preset: str, group: int | None):
    """The preset, or W4A16's with the group size asked (symmetric always: vLLM's CPU kernel takes no zero points)."""
    from compressed_tensors.quantization import preset_name_to_scheme

    s = preset_name_to_scheme(preset, ["Linear"])
    if group is not None and s.weights is not None and s.weights.strategy == "group":
        s.weights.group_size = group
    return s


# Norms that scale by (1 + weight): SmoothQuant divides the weight by its scales, which is right only for a norm
# that scales by the weight, so these models get GPTQ alone (and their post_attention_layernorm does not feed
# the MLP: the pre_feedforward one does)
OFFSET_NORMS = ("gemma", "gemma2", "gemma3", "gemma3_text")
PARTS = (  # a layer's part, the projections that read one norm's output, that norm
    ("self_attn", ("q_proj", "k_proj", "v_proj"), "input_layernorm"),
    ("self_attn", ("qkv_proj",), "input_layernorm"),  # Phi-3
    ("mlp", ("gate_proj", "up_proj"), "post_attention_layernorm"),
    ("mlp", ("gate_up_proj",), "post_attention_layernorm"),  # Phi-3
)


def layer_mappings(model) -> list:
    """SmoothQuant's mappings (a norm, the projections that read its output), one per part for the layers that
    have that part whole, from the modules themselves rather than llm-compressor's table by architecture: a fold
    attn output's no_op layers have no attention and an identity for input_layernorm; a mixture's MLP is its
    experts (no dense gate_proj), balanced by attention alone as llm-compressor does for Mixtral and Qwen-MoE;
    gpt-oss's experts are not Linear modules. Empty for a model whose norms SmoothQuant would get wrong."""
    import re

    if getattr(model.config, "model_type", None) in OFFSET_NORMS:
        return []
    modules = dict(model.named_modules())

    def norm(name: str) -> bool:  # a norm with a weight to divide (not a no_op layer's identity)
        return getattr(modules.get(name), "weight", None) is not None

    out = []
    for part, projections, norm_name in PARTS:
        ids = sorted(
            {
                m.group(2)
                for n in modules
                if (m := re.fullmatch(rf"(.*)layers\.(\d+)\.{part}\.{projections[0]}", n))
                and all(f"{m.group(1)}layers.{m.group(2)}.{part}.{p}" in modules for p in projections)
                and norm(f"{m.group(1)}layers.{m.group(2)}.{norm_name}")
            },
            key=int,
        )
        if ids:
            alt = "(" + "|".join(ids) + ")"
            out.append(
                ([rf"re:.*layers\.{alt}\.{part}\.{p}$" for p in projections], rf"re:.*layers\.{alt}\.{norm_name}$")
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("preset")
    ap.add_argument("--gptq", action="store_true")
    ap.add_argument("--ids", type=Path)
    ap.add_argument("--group", type=int)
    ap.add_argument("--ignore", nargs="*", default=["lm_head"])
    ap.add_argument("--trust-remote-code", action="store_true")
    ap.add_argument("--smoothquant", type=float, help="SmoothQuant's strength, run before GPTQ (W8A8)")
    a = ap.parse_args()

    import torch
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(a.model, dtype="auto", trust_remote_code=a.trust_remote_code)
    tok = AutoTokenizer.from_pretrained(a.model, trust_remote_code=False)
    config_groups = {"group_0": scheme(a.preset, a.group)}
    tokens, data, maps = 0, {}, []
    if a.gptq:
        ids = json.loads(a.ids.read_text())
        tokens = sum(len(b) for b in ids)
        ds = Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(b) for b in ids]})
        recipe = [GPTQModifier(config_groups=config_groups, ignore=a.ignore)]
        maps = layer_mappings(model) if a.smoothquant is not None else []
        if maps:  # else GPTQ alone (quantization.json's method says which)
            from llmcompressor.modifiers.smoothquant import SmoothQuantModifier

            recipe.insert(0, SmoothQuantModifier(smoothing_strength=a.smoothquant, mappings=maps))
        data = {"dataset": ds, "num_calibration_samples": len(ids), "max_seq_length": max(map(len, ids))}
    else:
        recipe = QuantizationModifier(config_groups=config_groups, ignore=a.ignore)
    with torch.no_grad():
        oneshot(model=model, recipe=recipe, processor=tok, trust_remote_code_model=a.trust_remote_code, **data)
    tmp = a.out.with_name(a.out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, save_compressed=True)
    tok.save_pretrained(tmp)
    kept = sorted(
        n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and not hasattr(m, "quantization_scheme")
    )
    facts = {
        "preset": a.preset,
        "group_size": a.group,
        "method": ("smoothquant+" if a.gptq and maps else "") + ("gptq" if a.gptq else "round-to-nearest"),
        "smoothing_strength": a.smoothquant if a.gptq and maps else None,
        "calibration_tokens": tokens,
        "unquantized": kept,
        "llmcompressor": version("llmcompressor"),
        "compressed_tensors": version("compressed-tensors"),
        "transformers": version("transformers"),
    }
    (tmp / "quantization.json").write_text(json.dumps(facts, indent=2) + "\n")
    shutil.rmtree(a.out, ignore_errors=True)
    tmp.rename(a.out)
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
