"""The schemes an output can be written in once more, quantized as vLLM deployments ship them (issue 39): a
compressed-tensors checkpoint made by llm-compressor in its own venv (integrations/quant/quantize.py), which vLLM
loads with no code of ours. Torch-free: the CLI and the API check a request with it, the worker acts on it.

    fp8-dynamic  FP8 weights per channel, activations per token at run time; no data. vLLM on a GPU (Hopper,
                 Ada; Ampere as weight-only FP8 Marlin); not vLLM's CPU backend
    w8a8         INT8 weights per channel (SmoothQuant, where the model's norms allow it, then GPTQ, on
                 calibration data), INT8 activations per token at run time; vLLM on a GPU and on x86 CPUs (oneDNN)
    w4a16        4-bit symmetric weights in groups (GPTQ), activations unquantized; vLLM on a GPU (Marlin) and
                 on x86 CPUs with AVX-512 (CPUWNA16LinearKernel: symmetric only, dimensions multiples of 32)

Only the decoder's Linear layers are quantized: the embeddings, the head (lm_head, tied or not) and a mixture's
routers stay as they are (a router's few logits decide which experts run; llm-compressor's own MoE examples keep
them too). Which outputs: the fold form, in block mode the base's own class with fewer layers, in attn mode a
DeciLM whose replaced layers' attention is no_op (llm-compressor loads it through the modeling_decilm.py it ships
with, which must be ours; vLLM runs it with its own nemotron_nas class, trust_remote_code for the config alone).
The nbl and linear forms are refused with their reason (FORM_ERRORS).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Scheme:
    name: str
    preset: str  # compressed-tensors' preset scheme (quantization/quant_scheme.py PRESET_SCHEMES)
    gptq: bool  # fitted by GPTQ on calibration data, else round-to-nearest with no data
    runs_in: tuple[str, ...]
    # SmoothQuant's strength, run before GPTQ: it moves activation outliers into the weights, so that per-token INT8
    # activations lose less. llm-compressor's W8A8 INT8 recipe (0.8); on SmolLM2 it took the w8a8 copy's WikiText-2
    # perplexity from 50.78 to 50.07 and the spread between two runtimes' log-probabilities from 0.23 to 0.14 nats
    # (bench/results/quant_logprobs_smollm2.md).
    smoothquant: float | None = None


SCHEMES = {
    s.name: s
    for s in (
        Scheme("fp8-dynamic", "FP8_DYNAMIC", False, ("vllm (GPU)",)),
        Scheme("w8a8", "W8A8", True, ("vllm (GPU)", "vllm (x86 CPU)"), smoothquant=0.8),
        Scheme("w4a16", "W4A16", True, ("vllm (GPU)", "vllm (x86 CPU, AVX-512)")),
    )
}
NAMES = tuple(SCHEMES)  # publish.quantize's, in the request
QUANTIZE_HELP = (
    "each output written once more per scheme, quantized as vLLM loads it with no code of ours (a compressed-tensors "
    f"checkpoint in the output's SCHEME/ folder): {', '.join(NAMES)}. Needs compression.form fold; with "
    "an evaluation, the quantized outputs and the base quantized alike are evaluated too, and gates.quantized may "
    "hold them to bounds of their own"
)
GROUPS = (128, 64, 32)  # w4a16's group sizes, largest first (fewer scales); vLLM's CPU kernel wants multiples of 32
IGNORE = ("lm_head", "re:.*mlp\\.gate$", "re:.*block_sparse_moe\\.gate$", "re:.*router$")  # head and routers
# The sample count and length llm-compressor's examples calibrate GPTQ with; a job's own calibration bounds both.
GPTQ_SAMPLES, GPTQ_SEQ_LEN = 512, 2048
FORM_ERRORS = {
    "nbl": "the nbl form runs through our modeling file and vLLM plugin, which load unquantized maps only; "
    "quantize a fold output (compression.form fold)",
    "linear": "the linear form is a DeciLM with replace_with_linear, which vLLM does not run at all (quantized or "
    "not); quantize a fold output",
}


def form_error(form: str, mode: str) -> str | None:
    """Why an output of `form` in `mode` cannot be quantized; None when it can (fold, either mode)."""
    return None if form == "fold" else FORM_ERRORS.get(form, f"form {form!r}: unknown")


def refuse_quantize(form: str, mode: str, quantize, gates_quantized) -> None:
    """A request's publish.quantize that its form cannot take, or gates.quantized with nothing to bound: ValueError."""
    if quantize and (why := form_error(form, mode)) is not None:
        raise ValueError(f"publish.quantize: {why}")
    if gates_quantized is not None and not quantize:
        raise ValueError("gates.quantized bounds the quantized outputs: set publish.quantize too")


def group_size(in_features: Iterable[int]) -> int | None:
    """The largest of GROUPS dividing every quantized Linear's input width; None when none does."""
    widths = set(in_features)
    return next((g for g in GROUPS if all(w % g == 0 for w in widths)), None)


def quantized_widths(config: dict) -> dict[str, int]:
    """The input widths of a decoder's Linear layers, by what they are (config.json's sizes): the attention's and
    MLP's inputs (hidden_size), the down projections' (intermediate_size, a mixture's expert size), the attention
    output's (heads x head_dim)."""
    hidden = config.get("hidden_size")
    heads = config.get("num_attention_heads")
    head_dim = config.get("head_dim") or (hidden // heads if hidden and heads else None)
    widths = {
        "hidden_size": hidden,
        "intermediate_size": config.get("intermediate_size"),
        "moe_intermediate_size": config.get("moe_intermediate_size"),
        "num_attention_heads x head_dim": heads * head_dim if heads and head_dim else None,
    }
    return {k: v for k, v in widths.items() if isinstance(v, int) and v > 0}


def shape_error(scheme: str, config: dict) -> str | None:
    """Why `scheme` cannot take a model of `config`; None when it can."""
    if scheme not in SCHEMES:
        return f"quantize {scheme!r}: one of {', '.join(SCHEMES)}"
    widths = quantized_widths(config)
    if scheme == "w4a16" and group_size(widths.values()) is None:
        odd = ", ".join(f"{k} {v:,}" for k, v in widths.items() if v % GROUPS[-1])
        return f"w4a16 quantizes in groups of {'/'.join(map(str, GROUPS))} inputs; this model's {odd} is not a multiple of {GROUPS[-1]}"
    return None
