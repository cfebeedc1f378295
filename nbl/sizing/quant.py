"""The quantization stage (publish.quantize, issue 39): how many quantizations a job runs, their work in the plan's
token-layers (stage_plan.py), their flops for the FLOP model and the peak memory of one (model.py). Pure.

A job quantizes each output once per scheme and, when it evaluates, the base once per scheme (the base+scheme row
of the comparison); each quantized model is then evaluated too. Each quantization is llm-compressor's `oneshot` in
a process of its own (integrations/quant/quantize.py), after the worker released the base. GPTQ (w8a8, w4a16)
runs its calibration blocks, at most GPTQ_SAMPLES x GPTQ_SEQ_LEN of the job's, through each layer twice (once for
the Hessians, once to pass the quantized layer's outputs on: its sequential pipeline) and solves each Linear on
its Hessian; FP8 (round-to-nearest) loads, rounds and writes the weights, no data. A fold block output of k has
k layers fewer than the base.
"""

from __future__ import annotations

from nbl.outputs.quant_schemes import GPTQ_SAMPLES, GPTQ_SEQ_LEN, SCHEMES, group_size

from .options import Options
from .shapes import Shape

# Token-layers of one quantization, measured on SmolLM2-135M (30 layers, float32) by bench/quant_cost.py
# (`.venv/bin/python bench/quant_cost.py`: worker/quant/quantize.quantize() on one thread, in CPU seconds, as wall
# seconds on this shared 2-core machine ran 3-6x longer under load; bench/results/quant_cost_smollm2.jsonl). A
# plain forward ran 14,500 token-layers per CPU second there, so calibration ~9,400 (stage_plan's
# EVAL_PER_TOKEN_LAYER: 0.65). w8a8 took 55.0 s on 8 x 256 tokens and 66.8 s on 16 x 256, w4a16 49.4 s and
# 62.8 s: 12.6 s more per 2,048 tokens (2.05e-4 s a token-layer, 1.9 of calibration's: two forwards and the
# Hessians) and ~40 s besides (the process, the load and save, each Linear's solve: 1.3 s a layer); fp8-dynamic
# 7.1 s (0.24 s a layer); a tiny Llama's whole quantization 5.5 s, the process alone.
GPTQ_PER_TOKEN_LAYER = 1.9
GPTQ_PER_LAYER = 12_500
RTN_PER_LAYER = 2_200
# The process' host memory, measured as peak RSS (the same runs, and again on two threads): a tiny Llama (2
# layers, d 128) 592 MB with fp8-dynamic, 655-661 MB with w8a8 (python, torch, transformers, llm-compressor
# and datasets imported); SmolLM2-135M (538 MB in float32) 1.28-1.50 GB with fp8-dynamic, 1.33-1.35 GB with w8a8
# and 1.28-1.58 GB with w4a16 on 8 and 16 x 256 tokens: 1.7 copies of the weights at the most (the loaded
# weights, the checkpoint's pages read through safetensors' mmap, the compressed state being saved).
QUANT_RUNTIME_HOST = 660 * 10**6
MODEL_COPIES = 1.7
CACHE_COPIES = 2  # the hidden states between layers, every block's (llm-compressor keeps them on the host): in, out
HESSIAN_BYTES = 4  # float32
# The FLOP model's (slow, fast) pairs (model.py): a process' start (a tiny Llama's whole quantization took 5-6 s
# here, the imports mostly), and the weights read and written, from busy disks to fast ones
QUANT_START_S = (10, 3)
WEIGHTS_BPS = (2e8, 2e9)


def gptq_tokens(num_samples: int, seq_len: int) -> int:
    """The tokens GPTQ calibrates on: the job's blocks, at most GPTQ_SAMPLES of at most GPTQ_SEQ_LEN tokens
    (worker/quant/blocks.py)."""
    return min(num_samples, GPTQ_SAMPLES) * min(seq_len, GPTQ_SEQ_LEN)


def quantized_layers(layers: int, ks: tuple[int, ...], base: bool) -> list[int]:
    """The decoder layers of each model a scheme quantizes: each output (k auto: one, at most the base's), and the
    base when the job evaluates."""
    return [max(1, layers - k) for k in ks or (0,)] + ([layers] if base else [])


def token_layers(schemes: tuple[str, ...], models: list[int], num_samples: int, seq_len: int) -> float:
    """The quantization stage's work: each model of `models` (its layers) once per scheme."""
    tokens = gptq_tokens(num_samples, seq_len)
    per_layer = sum(
        GPTQ_PER_LAYER + tokens * GPTQ_PER_TOKEN_LAYER if SCHEMES[s].gptq else RTN_PER_LAYER for s in schemes
    )
    return sum(models) * per_layer


def linears(shape: Shape) -> list[tuple[int, int, float, int]]:
    """(in, out, share of the tokens it sees, count) of the Linears of the largest layer GPTQ fits: the
    attention's q, k, v, o and the MLP's gate, up and down, or each expert's and the shared expert's (the router
    is never quantized: quant_schemes.IGNORE)."""
    d, attn, kv = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    out = [(d, attn, 1.0, 1), (d, kv, 1.0, 2), (attn, d, 1.0, 1)]
    if shape.experts and shape.moe_layers:
        i_e, share = shape.expert_intermediate, shape.experts_per_token / shape.experts
        out += [(d, i_e, share, 2 * shape.experts), (i_e, d, share, shape.experts)]
        if shape.shared_intermediate:
            out += [(d, shape.shared_intermediate, 1.0, 2), (shape.shared_intermediate, d, 1.0, 1)]
    else:
        out += [(d, shape.intermediate, 1.0, 2), (shape.intermediate, d, 1.0, 1)]
    return out


# A quantized weight on disk: one byte (INT8, FP8) with a scale per output channel, or 4 bits (w4a16, packed
# 8 to an int32) with a 16-bit scale per group. SmolLM2 (28 layers of 30 quantized, tied 16-bit embeddings) gave
# 156 MB as w8a8 and 109 MB as w4a16 against 155.7 and 109.2 from this.
WEIGHT_BYTES = {"fp8-dynamic": 1.0, "w8a8": 1.0, "w4a16": 0.5}
SCALE_BYTES = 2


def copy_bytes(shape: Shape, scheme: str, layers: int, dt: int) -> int:
    """One quantized copy on disk: `layers` decoder layers' Linears at the scheme's width, the embeddings, the
    head, the norms and the routers as they were (dt bytes a parameter)."""
    per_layer = shape.layers_params / shape.layers  # the Linears, norms and routers aside (a few d each)
    if SCHEMES[scheme].preset == "W4A16":
        group = group_size(i for i, _, _, _ in linears(shape)) or 32
        per_weight = WEIGHT_BYTES[scheme] + SCALE_BYTES / group
    else:
        per_weight = WEIGHT_BYTES[scheme] + SCALE_BYTES / shape.hidden  # a scale per output row
    rest = shape.embed_params * (1 if shape.tied else 2) + shape.hidden
    return int(layers * per_layer * per_weight + rest * dt)


def quantized_disk(shape: Shape, opts: Options, dt: int) -> int:
    """The copies a job writes: each output's per scheme (published with it), and the base's when it evaluates
    (beside the work directory until the evaluation is over, so at the peak together)."""
    models = quantized_layers(shape.layers, opts.ks, opts.quantized_eval) if opts.quantize else []
    return sum(copy_bytes(shape, s, n, dt) for s in opts.quantize for n in models)


def hessian_bytes(shape: Shape) -> int:
    """GPTQ's Hessians of one layer, which it holds until the layer is solved: in x in float32 per Linear."""
    return sum(HESSIAN_BYTES * i * i * n for i, _, _, n in linears(shape))


def gptq_flops(shape: Shape, models: list[int], num_samples: int, seq_len: int) -> float:
    """One GPTQ scheme over `models`: per layer, each token forward twice (2 x 2 active params) and into each
    Linear's Hessian (2 in²), then each Linear solved (a Cholesky in³/3, the inverse ~in³, the updates 2 out in²)."""
    tokens = gptq_tokens(num_samples, seq_len)
    per_token = 4 * shape.active_layer_params + sum(2 * i * i * share * n for i, _, share, n in linears(shape))
    solve = sum((4 * i**3 / 3 + 2 * o * i * i) * n for i, o, _, n in linears(shape))
    return sum(models) * (tokens * per_token + solve)


def quantize_memory(
    shape: Shape, schemes: tuple[str, ...], num_samples: int, seq_len: int, on_gpu: bool, fwd_per_token: int
) -> dict[str, int]:
    """Peak {"device", "host"} of one quantization's process, CUDA's context apart: the base's size (the largest
    model quantized) loaded in its stored dtype (quantize.py: dtype auto) on the host, MODEL_COPIES of it; with
    GPTQ, one layer's Hessians and one block's forward (`fwd_per_token`: model.py's transients per token) where
    the layer runs (a GPU when there is one: llm-compressor moves each layer there), and every block's hidden
    states between layers on the host."""
    dt = shape.checkpoint_bytes_per_param
    host = QUANT_RUNTIME_HOST + MODEL_COPIES * shape.params * dt
    if not any(SCHEMES[s].gptq for s in schemes):
        return {"device": 0, "host": int(host)}
    work = hessian_bytes(shape) + min(seq_len, GPTQ_SEQ_LEN) * fwd_per_token  # oneshot's batch: one block
    host += CACHE_COPIES * gptq_tokens(num_samples, seq_len) * shape.hidden * dt
    if on_gpu:
        return {"device": int(shape.layer_params * dt + work), "host": int(host)}
    return {"device": 0, "host": int(host + work)}


def quantize_work(shape: Shape, opts: Options) -> tuple[float, tuple[float, float], int]:
    """For the FLOP model (model.py): the GPTQ flops of `opts`' quantizations, their (slow, fast) seconds besides
    (each process' start and its weights read and written), and the quantized models evaluated."""
    if not opts.quantize:
        return 0.0, (0.0, 0.0), 0
    models = quantized_layers(shape.layers, opts.ks, opts.quantized_eval)
    flops = sum(gptq_flops(shape, models, opts.num_samples, opts.seq_len) for s in opts.quantize if SCHEMES[s].gptq)
    runs = len(models) * len(opts.quantize)
    io = 2 * shape.params * shape.checkpoint_bytes_per_param
    overhead = tuple(runs * (start + io / bps) for start, bps in zip(QUANT_START_S, WEIGHTS_BPS))
    return flops, overhead, runs if opts.quantized_eval else 0
