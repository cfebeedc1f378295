"""What a compression needs, before anything is downloaded: pure arithmetic on a Shape and the options.

The phases, as the code runs today (worker/pipeline.py, worker/engine):

    calibrate   layer by layer (worker/engine/calibration/calibrate.py): one layer's weights, one layer's float64
                sums, one batch of activations on each device; the hidden states of all blocks on the
                host (activations.py), spilt to disk past NBL_HOST_CACHE_BYTES. Nothing else is loaded:
                the model is a meta-device skeleton until then.
    select      measured selection (criterion greedy/auto, k auto): the whole model on the first device
                when it fits, else read layer by layer again for every set; the base's hidden states at
                each layer a set starts at, on the host (set_loss.py)
    save        each output written tensor by tensor from the base's shards (shard_writer.py): one tensor
                and its cast copy on the host
    check       each output reloaded in a fresh process (publish/loadcheck.py): a second runtime beside
                the first, and one whole model placed as below
    quantize    publish.quantize: llm-compressor in a process of its own, the whole model on the host (quant.py)
    evaluate    the base, then each output, one whole model at a time (eval/compare.py)

A whole model goes where worker/engine/placement.py puts it (spread.py): on one GPU when it fits, else
spread over the GPUs, the host and disk. On `cpu` every byte is host memory (device_bytes 0).
Data-parallel devices (`--devices`) split the calibration blocks; each process holds its own layer,
sums and batch. The constants below were measured on this machine (bench/estimate_accuracy.py checks
the result against peak RSS).

The options that change the figures, and the counts the engine derives from them (batch size, held-out
and selection blocks), are nbl/sizing/options.py's.

A mixture of experts is held whole and run sparse: memory counts every expert (the weights of a whole model,
and calibration's one layer with all its experts, shapes.Shape.layer_params), time counts what a token goes
through (its top-k experts, the router and any shared expert: Shape.active_layer_params), and a forward's
transients are those of its routed experts (Shape.mlp_act_bytes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from nbl.selection.sets import PREFIX_CACHE_BYTES, expected_sets

from .head import head_chunk_bytes
from .options import Options, default_batch_size, holdout_count, measured, selection_blocks
from .quant import quantize_memory, quantize_work, quantized_disk
from .refine import heal_bytes, refine_token_layers
from .shapes import DTYPE_BYTES, Shape
from .spread import Memory, Spread, spread

GB = 10**9
# Host memory of a process before any model: python + torch + transformers imported (268 MB measured,
# bench/results/memory_cpu.json), plus the tokenizer, the calibration texts and glibc's arenas.
RUNTIME_HOST = 450 * 10**6
CUDA_CONTEXT_HOST = 1 * GB  # the CUDA runtime's own host memory once a device is initialised
CUDA_CONTEXT_DEVICE = 600 * 10**6  # CUDA context + cuBLAS workspace on each device
# A batch's transients per token, in units of d (model dtype): layer input and output, the normed
# input, q/k/v/o and attention output, the residual; the MLP adds 3 x I (gate, up, act*up).
ACT_WIDTHS_D = 8
# Accumulation transients per token (stats.py LayerAccumulator.add), float32 columns of width d:
# x, y, h.float(), h + y as float.
ACC_WIDTHS_D = 4
NEW_TOKENS = 8  # publish/loadcheck.NEW_TOKENS

PROBE_ACTS = 64 * 10**6  # the load check: a 14-token prompt and 8 generated tokens (publish/loadcheck.py)
EVAL_TOKENS_PER_CORPUS = 300_000  # wikitext-2 test is ~290k tokens with a 49k-128k vocabulary
TASK_TOKENS_PER_DOC = 4 * 128  # ~4 choices of ~128 tokens
TASK_DOCS = 2_000  # a task's documents when no limit is given (order of magnitude)
# Every pair of rates and overheads below is (slow, fast): index SLOW makes the high end of a time range,
# FAST its low end (_seconds).
SLOW, FAST = 0, 1
# Throughput per process, in flop/s: CPU from a shared core under load (this 2-core
# machine at load 9 ran nbl compress at 4.5-8.4 GFLOP/s all overheads included,
# bench/results/estimate_accuracy.json) to an idle many-core server; GPU bf16 forward and fp32
# (TF32 off) products from an L4-class card to an H100/H200.
CPU_FLOPS = (3e9, 2e11)
STARTUP_S = (60, 5)  # imports, tokenizing the calibration texts, reading the stem
GPU_FORWARD_FLOPS = (5e13, 4e14)
GPU_PRODUCT_FLOPS = (1e13, 6e13)
GPU_TF32_FLOPS = (4e13, 3e14)  # TF32 products (the GPU default, --stats-precision auto): spec sheets, not measured
DOWNLOAD_BPS = (1e8, 1e9)  # 100 MB/s to 1 GB/s from the Hub


def logit_bytes(dt: int) -> int:
    """Bytes per token and vocabulary entry of a whole batch's logits and their loss (the tasks' scoring,
    eval/loglikelihood.py): the logits in the model's dtype, their float32 copy, log-softmax. Measured when
    perplexity took them whole too: SmolLM2 evaluated 2.28 GB, random d=1024 x 24 3.31 GB
    (bench/results/estimate_accuracy.md); one float32 copy alone left both 26-34% short. Perplexity, the loss
    probe and measured selection take them a chunk of positions at a time (head.py)."""
    return dt + 4 + 4


@dataclass
class Estimate:
    device_bytes: int  # peak on one device (0 on cpu)
    host_bytes: int  # peak host memory of the whole job
    disk: dict[str, int]  # download, spill, stats_cache, outputs
    seconds: tuple[float, float]
    devices: list[str]
    phases: dict[str, dict[str, int]] = field(default_factory=dict)  # phase -> device/host bytes
    dtype: str = ""
    batch_size: int = 1

    @property
    def disk_bytes(self) -> int:
        return sum(self.disk.values())


def sums_bytes(d: int, modes: int, lags: int = 0) -> int:
    """float64 sums of one layer (stats.LayerAccumulator.nbytes): per split n, Σx, Σxxᵀ and per mode
    Σy, tr Σyyᵀ, Σyxᵀ, Σcos; Σyyᵀ once per mode, one Σ Δ fᵀ per lag; the shifts."""
    per_split = 1 + d + d * d + modes * (d + 1 + d * d + 1)
    return 8 * (2 * per_split + (modes + lags) * d * d + (1 + modes) * d)


def fold_extra(opts: Options) -> tuple[int, int]:
    """(lag sums per layer, layers of MLP outputs the hidden cache holds) of the form's calibration
    (form_taps.py, calibration_stage.max_run): fold attn keeps the previous layer's MLP output, fold
    block the last max(k) layers' and the lags 2..max(k); other forms neither."""
    if opts.form != "fold":
        return 0, 0
    run = max(opts.ks) if opts.mode == "block" else 1
    return (run - 1 if opts.mode == "block" else 0), run


def estimate(shape: Shape, opts: Options, devices: list[str], memory: Memory = Memory()) -> Estimate:
    """`memory`: what each device and the host hold, when known (a worker class, a worker's own): a whole
    model larger than one device is then spread as the worker spreads it (spread.py)."""
    on_gpu = any(dev.startswith("cuda") for dev in devices)
    procs = max(1, len(devices))
    dtype = opts.dtype if opts.dtype not in ("auto", None) else ("bfloat16" if on_gpu else "float32")
    dt = DTYPE_BYTES[dtype]
    pt = DTYPE_BYTES.get(opts.stats_precision, 4)  # tf32 and auto multiply float32 buffers
    d, L = shape.hidden, shape.layers
    mlp_act = shape.mlp_act_bytes(dt)
    bs = opts.batch_size or default_batch_size(opts.seq_len, on_gpu)
    tokens_b = min(bs, math.ceil(opts.num_samples / procs)) * opts.seq_len

    # -- calibrate: per process ------------------------------------------------------------------
    layer_w = shape.layer_params * dt  # the largest layer, every expert
    lags, kept_mlp = fold_extra(opts)
    sums = sums_bytes(d, 1, lags)  # calibration_stage asks for the job's mode only
    scratch = d * d * pt  # stats._scratch: one (d, d) product buffer
    scoring = 3 * d * d * 8  # score_stage: a few float64 (d, d) temporaries while the layer is scored
    acts = tokens_b * (ACT_WIDTHS_D * d * dt + mlp_act) + tokens_b * ACC_WIDTHS_D * d * 4
    stem = shape.embed_params * dt + tokens_b * d * dt  # first pass: embeddings and one batch
    head_b = head_chunk_bytes(shape.vocab, dt)  # one chunk of positions' logits and loss (head.py)
    per_proc = max(stem, layer_w + sums + scratch + scoring + acts)
    if opts.criterion == "loss":  # the probe's head (LM head, a chunk of positions at a time) after its layer passes:
        # on top of them, as the heap they grew is kept (Qwen2.5-0.5B shape: 1.72 GB measured, memory_vocab.md)
        per_proc += shape.embed_params * dt + head_b
    # the host keeps every block's hidden states (the process' share), spilt past the budget
    hidden = (1 + kept_mlp) * math.ceil(opts.num_samples / procs) * opts.seq_len * d * dt * procs
    if opts.criterion == "loss":  # L + 1 streams of the held-out hidden states
        hidden += (L + 1) * holdout_count(opts.num_samples, opts.holdout_fraction) * opts.seq_len * d * dt
    in_memory = hidden if opts.host_cache_bytes is None else min(hidden, opts.host_cache_bytes)
    spill = hidden - in_memory
    # a layer's tensors pass through the host on their way to the device; each shard is written from
    # a host copy of the sums (to_flat + save_file's buffer)
    shard_write = 2 * sums
    runtime = procs * RUNTIME_HOST + (procs * CUDA_CONTEXT_HOST if on_gpu else 0)
    if on_gpu:
        cal_device = per_proc + CUDA_CONTEXT_DEVICE
        cal_host = runtime + in_memory + procs * (layer_w + shard_write)
    else:
        cal_device = 0
        cal_host = runtime + in_memory + procs * (per_proc + sums)
    phases = {"calibrate": {"device": cal_device, "host": cal_host}}

    # -- the phases that hold a whole model, or stream one to disk ----------------------------------
    model_b = shape.params * dt  # every expert
    gpus = sum(dev.startswith("cuda") for dev in devices)
    ctx_dev = CUDA_CONTEXT_DEVICE if on_gpu else 0
    one = RUNTIME_HOST + (CUDA_CONTEXT_HOST if on_gpu else 0)  # one process' runtime (the first; the check's child)
    placed = spread(model_b, gpus, memory, ctx_dev)
    window = min(shape.context, 2048)  # perplexity windows (eval/perplexity.default_window)
    fwd_per_token = ACT_WIDTHS_D * d * dt + mlp_act  # a forward's transients
    # perplexity: a window's forward, then its loss a chunk of positions at a time; tasks: a batch's whole logits
    eval_acts = window * fwd_per_token + head_b
    if opts.tasks:
        eval_acts = max(eval_acts, window * (fwd_per_token + shape.vocab * logit_bytes(dt)))
    if measured(opts):
        entry = selection_blocks(opts) * opts.seq_len * d * dt  # the selection blocks' hidden states, once
        sets = expected_sets(opts.criterion, opts.ks, L, opts.greedy_width, opts.k_auto)
        # one batch through a layer, one chunk of the head's logits, and the set's states carried up the layers
        sel_acts = tokens_b * fwd_per_token + head_b + entry
        # the base's inputs at each layer a set starts at, and the prefix cache (at most one entry a set, within
        # its budget: selection/prefix_cache.py)
        sel_hidden = min(L, sets) * entry + min(PREFIX_CACHE_BYTES, sets * entry)
        if gpus and placed.device < model_b:  # larger than the first GPU: each set reads the layers again
            phases["select"] = {"device": layer_w + sel_acts + ctx_dev, "host": one + sel_hidden + layer_w}
        else:
            phases["select"] = {
                "device": placed.device + sel_acts + ctx_dev if on_gpu else 0,
                "host": one + sel_hidden + placed.host + (0 if on_gpu else sel_acts),
            }
    if opts.heal is not None:  # the whole model (placed as for evaluation), its backward and the maps' training
        extra = heal_bytes(d, shape.intermediate, L, shape.vocab, opts.seq_len, opts.heal, opts.ks, dt, mlp_act)
        phases["refine"] = {
            "device": placed.device + extra + ctx_dev if on_gpu else 0,
            "host": one + placed.host + (0 if on_gpu else extra),
        }
    if opts.outputs:  # one tensor at a time and its cast copy; the largest is the embedding (or LM head), an MLP's
        phases["save"] = {"device": 0, "host": one + 2 * shape.largest_tensor * dt}  # or an expert's (fused: a layer's)
        if opts.load_check:  # the parent keeps its runtime; the child places one output and generates a few tokens
            phases["check"] = {
                "device": placed.device + ctx_dev + (PROBE_ACTS if on_gpu else 0),
                "host": one + one + placed.host + (0 if on_gpu else PROBE_ACTS),
            }
    if opts.quantize:  # after the base is released: the worker's runtime beside llm-compressor's process (quant.py)
        q = quantize_memory(shape, opts.quantize, opts.num_samples, opts.seq_len, on_gpu, fwd_per_token)
        q_host = one + q["host"] + (CUDA_CONTEXT_HOST if on_gpu else 0)
        phases["quantize"] = {"device": q["device"] + ctx_dev, "host": q_host}
    if opts.whole_model:  # the base, then each output (and each quantized model), one at a time
        phases["evaluate"] = {
            "device": placed.device + eval_acts + ctx_dev if on_gpu else 0,
            "host": one + placed.host + (0 if on_gpu else eval_acts),
        }

    device_bytes = max(p["device"] for p in phases.values())
    host_bytes = max(p["host"] for p in phases.values())
    n_out = len(opts.ks) if opts.outputs else 0
    placed_whole = opts.whole_model or (opts.outputs and opts.load_check)  # check, evaluate spread; selection streams
    saved = shape.checkpoint_bytes_per_param if opts.save_dtype == "auto" else DTYPE_BYTES.get(opts.save_dtype, dt)
    disk = {
        "download": shape.download_bytes,
        "spill": spill,
        "stats_cache": L * sums,  # one shard per layer, kept (or removed after --no-cache)
        "outputs": n_out * shape.params * saved,
        "quantized": quantized_disk(shape, opts, saved) if opts.outputs else 0,  # publish.quantize's copies (quant.py)
        "offload": placed.disk if placed_whole else 0,  # accelerate's disk offload of a model larger than the devices
    }
    return Estimate(
        device_bytes=int(device_bytes),
        host_bytes=int(host_bytes),
        disk={k: int(v) for k, v in disk.items()},
        seconds=_seconds(shape, opts, on_gpu, procs, disk["download"], placed),
        devices=list(devices),
        phases=phases,
        dtype=dtype,
        batch_size=bs,
    )


def _seconds(
    shape: Shape, opts: Options, on_gpu: bool, procs: int, download: int, placed: Spread
) -> tuple[float, float]:
    """(low, high), the FAST rates' time and the SLOW rates': forward flops 2 x active params per token (a mixture of
    experts: the top-k experts of each layer, not all) plus attention 2 T H hd; the statistics' products
    2 d² per token for Σyxᵀ and 10/16 of that for the symmetric Σxxᵀ and Σyyᵀ (products.gram); the loss probe
    ~L/2 passes over the held-out blocks; measured selection ~L/2 layers per set over the selection blocks;
    evaluation one forward of the base and of each output over its tokens. `placed`: where a whole model's
    weights go; each of its forwards brings the offloaded ones to the GPU (spread.py)."""
    d, L = shape.hidden, shape.layers
    tokens = opts.num_samples * opts.seq_len
    attn = 2 * opts.seq_len * shape.heads * shape.head_dim
    fwd_layer = 2 * shape.active_layer_params + attn  # per token, on average over the layers
    head = 2 * shape.embed_params
    forward = tokens * L * fwd_layer
    products = tokens * L * (1 + 2 * 10 / 16) * 2 * d * d
    if opts.criterion == "loss":
        held = holdout_count(opts.num_samples, opts.holdout_fraction) * opts.seq_len
        forward += held * (L * L / 2 * fwd_layer + (L + 1) * head)
    sets = expected_sets(opts.criterion, opts.ks, L, opts.greedy_width, opts.k_auto) if measured(opts) else 0
    selection = sets * selection_blocks(opts) * opts.seq_len * (L / 2 * fwd_layer + head)
    eval_tokens = len(opts.perplexity) * (opts.eval_max_tokens or EVAL_TOKENS_PER_CORPUS)
    eval_tokens += len(opts.tasks) * (opts.eval_limit or TASK_DOCS) * TASK_TOKENS_PER_DOC
    quant_flops, quant_s, quantized = quantize_work(shape, opts)  # publish.quantize: GPTQ, processes (quant.py)
    models = 1 + len(opts.ks) + quantized
    evaluation = models * eval_tokens * (L * fwd_layer + head)
    # refit: calibration's forward again per output; heal: forwards and backwards of the whole model
    evaluation += (
        refine_token_layers(
            opts.num_samples,
            opts.seq_len,
            L,
            opts.ks,
            opts.refit,
            opts.heal,
            head / fwd_layer,
            opts.selection_samples or 0,
        )
        * fwd_layer
    )  # the guard: a
    # selection dataset is taken as other than the calibration's (Options does not say which)
    # forward passes of a whole model: evaluation windows, the load check's prompt and generated tokens, the sets
    passes = models * math.ceil(eval_tokens / min(shape.context, 2048)) if opts.whole_model else 0
    passes += len(opts.ks) * (1 + NEW_TOKENS) if opts.outputs and opts.load_check else 0
    passes += sets * max(1, math.ceil(selection_blocks(opts) / max(1, default_batch_size(opts.seq_len, on_gpu))))

    def at(i: int) -> float:  # i: SLOW or FAST, one index into every pair
        if on_gpu:  # calibration is split between the processes; evaluation runs in one
            rate = GPU_PRODUCT_FLOPS if opts.stats_precision in ("float32", "float64") else GPU_TF32_FLOPS
            compute = (forward / GPU_FORWARD_FLOPS[i] + products / rate[i]) / procs
            compute += (evaluation + selection) / GPU_FORWARD_FLOPS[i] + passes * placed.transfer_s(i)
        else:
            compute = (forward + products) / CPU_FLOPS[i] / procs + (evaluation + selection) / CPU_FLOPS[i]
        compute += quant_flops / (GPU_PRODUCT_FLOPS if on_gpu else CPU_FLOPS)[i] + quant_s[i]
        return compute + download / DOWNLOAD_BPS[i] + STARTUP_S[i]

    return round(at(FAST), 1), round(at(SLOW), 1)
