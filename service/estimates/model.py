"""What a compression needs, before anything is downloaded: pure arithmetic on a Shape and the options.

Two phases, as the code runs today:

    calibrate   layer by layer (worker/engine/calibrate.py): one layer's weights, one layer's float64
                sums, one batch of activations on each device; the hidden states of all blocks on the
                host (activations.py), spilt to disk past NBL_HOST_CACHE_BYTES.
    whole       the whole model in memory on the device: `nbl compress --out` loads it to save
                (engine/loading.load_weights), a job loads it up front (worker/pipeline.py), and a
                job's evaluation holds the base beside each output reloaded from disk, while the load
                check reloads each output in a child process: two models at once.

On `cpu` every byte is host memory (device_bytes 0). Data-parallel devices (`--devices`) split the
blocks; each process holds its own layer, sums and batch. The constants below were measured on this
machine (bench/estimate_accuracy.py checks the result against peak RSS).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .shapes import DTYPE_BYTES, Shape

GB = 10**9
# Host memory of a process before any model: python + torch + transformers imported (268 MB measured,
# bench/results/memory_cpu.json), plus the tokenizer, the calibration texts and glibc's arenas.
RUNTIME_HOST = 450 * 10**6
SAVE_FACTOR = 1.5
CUDA_CONTEXT_HOST = 1 * GB  # the CUDA runtime's own host memory once a device is initialised
CUDA_CONTEXT_DEVICE = 600 * 10**6  # CUDA context + cuBLAS workspace on each device
# A batch's transients per token, in units of d (model dtype): layer input and output, the normed
# input, q/k/v/o and attention output, the residual; the MLP adds 3 x I (gate, up, act*up).
ACT_WIDTHS_D = 8
# Accumulation transients per token (stats.py LayerAccumulator.add), float32 columns of width d:
# x, y, h.float(), h + y as float.
ACC_WIDTHS_D = 4
EVAL_TOKENS_PER_CORPUS = 300_000  # wikitext-2 test is ~290k tokens with a 49k-128k vocabulary
TASK_TOKENS_PER_DOC = 4 * 128  # ~4 choices of ~128 tokens
TASK_DOCS = 2_000  # a task's documents when no limit is given (order of magnitude)
# Throughput per process, (slow, fast), in flop/s: CPU from a shared core under load (this 2-core
# machine at load 9 ran nbl compress at 4.5-8.4 GFLOP/s all overheads included,
# bench/results/estimate_accuracy.json) to an idle many-core server; GPU bf16 forward and fp32
# (TF32 off) products from an L4-class card to an H100/H200.
CPU_FLOPS = (3e9, 2e11)
STARTUP_S = (5, 60)  # imports, tokenizing the calibration texts, reading the stem
GPU_FORWARD_FLOPS = (5e13, 4e14)
GPU_PRODUCT_FLOPS = (1e13, 6e13)
DOWNLOAD_BPS = (1e8, 1e9)  # 100 MB/s to 1 GB/s from the Hub


@dataclass(frozen=True)
class Options:
    """The job's (or `nbl compress`'s) options that change the figures."""

    num_samples: int = 256
    seq_len: int = 2048
    batch_size: int | None = None  # blocks per batch; None: calibration_stage.default_batch_size
    mode: str = "attn"
    method: str = "nbl"
    criterion: str = "cca"
    ks: tuple[int, ...] = (4,)
    dtype: str = "auto"  # float32 on CPU, bfloat16 on GPU (engine/loading.resolve_dtype)
    stats_precision: str = "float32"
    host_cache_bytes: int | None = None  # None: no limit, nothing spilt
    outputs: bool = True  # saved outputs (a job always; `nbl compress` with --out)
    whole_model: bool = True  # the whole model loaded (a job; `nbl compress --eval`)
    perplexity: tuple[str, ...] = ()
    eval_max_tokens: int | None = None
    tasks: tuple[str, ...] = ()
    eval_limit: int | None = None
    holdout_fraction: float = 0.1


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


def default_batch_size(seq_len: int, on_gpu: bool) -> int:
    """As worker/engine/calibration_stage.default_batch_size (a test keeps the two equal)."""
    return max(1, (16384 if on_gpu else 2048) // seq_len)


def holdout_count(num_blocks: int, fraction: float) -> int:
    """As worker/engine/calibrate.holdout_count."""
    if fraction <= 0 or num_blocks < 2:
        return 0
    return max(1, int(num_blocks * fraction))


def sums_bytes(d: int, modes: int) -> int:
    """float64 sums of one layer (stats.LayerAccumulator.nbytes): per split n, Σx, Σxxᵀ and per mode
    Σy, tr Σyyᵀ, Σyxᵀ, Σcos; Σyyᵀ once per mode; the shifts."""
    per_split = 1 + d + d * d + modes * (d + 1 + d * d + 1)
    return 8 * (2 * per_split + modes * d * d + (1 + modes) * d)


def estimate(shape: Shape, opts: Options, devices: list[str]) -> Estimate:
    on_gpu = any(dev.startswith("cuda") for dev in devices)
    procs = max(1, len(devices))
    dtype = opts.dtype if opts.dtype not in ("auto", None) else ("bfloat16" if on_gpu else "float32")
    dt = DTYPE_BYTES[dtype]
    pt = DTYPE_BYTES[opts.stats_precision]
    d, L, I = shape.hidden, shape.layers, shape.intermediate
    bs = opts.batch_size or default_batch_size(opts.seq_len, on_gpu)
    tokens_b = min(bs, math.ceil(opts.num_samples / procs)) * opts.seq_len

    # -- calibrate: per process ------------------------------------------------------------------
    layer_w = shape.layer_params * dt
    sums = sums_bytes(d, 1)  # calibration_stage asks for the job's mode only
    scratch = d * d * pt  # stats._scratch: one (d, d) product buffer
    scoring = 3 * d * d * 8  # score_stage: a few float64 (d, d) temporaries while the layer is scored
    acts = tokens_b * (ACT_WIDTHS_D * d + 3 * I) * dt + tokens_b * ACC_WIDTHS_D * d * 4
    stem = shape.embed_params * dt + tokens_b * d * dt  # first pass: embeddings and one batch
    if opts.criterion == "loss":  # the probe's head: final norm + LM head over one batch's logits
        stem = max(stem, shape.embed_params * dt + tokens_b * shape.vocab * 4)
    per_proc = max(stem, layer_w + sums + scratch + scoring + acts)
    # the host keeps every block's hidden states (the process' share), spilt past the budget
    hidden = math.ceil(opts.num_samples / procs) * opts.seq_len * d * dt * procs
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

    # -- whole: the model in memory (saving, a job's evaluation and load check) ------------------
    model_b = shape.params * dt
    if opts.whole_model or opts.outputs:
        copies = 2 if (opts.whole_model and opts.outputs) else 1  # base + an output reloaded (eval, check)
        eval_acts = min(opts.seq_len, 2048) * (shape.vocab * 4 + (ACT_WIDTHS_D * d + 3 * I) * dt)
        # save_pretrained serializes through host buffers: 1.5x the model at peak, measured on SmolLM2
        # (bench/results/estimate_accuracy.json)
        saving = SAVE_FACTOR * model_b if opts.outputs else 0
        # a job's load check reloads each output in a fresh process (`nbl compress --out` has none)
        child = RUNTIME_HOST if opts.outputs and opts.whole_model else 0
        if on_gpu:  # a job's calibration runs beside the model already loaded
            cal_beside = model_b + per_proc if opts.whole_model else 0
            whole_dev = max(copies * model_b + eval_acts, cal_beside) + CUDA_CONTEXT_DEVICE
            phases["whole"] = {"device": whole_dev, "host": runtime + child + in_memory + max(saving, model_b)}
        else:
            cal_beside = model_b + in_memory + per_proc + sums if opts.whole_model else 0
            phases["whole"] = {"device": 0, "host": runtime + child + max(saving, copies * model_b + eval_acts,
                                                                           cal_beside)}

    device_bytes = max(p["device"] for p in phases.values())
    host_bytes = max(p["host"] for p in phases.values())
    n_out = len(opts.ks) if opts.outputs else 0
    disk = {
        "download": shape.params * shape.checkpoint_bytes_per_param,
        "spill": spill,
        "stats_cache": L * sums_bytes(d, 1),  # one shard per layer, kept (or removed after --no-cache)
        "outputs": n_out * model_b,
    }
    return Estimate(device_bytes=int(device_bytes), host_bytes=int(host_bytes), disk={k: int(v) for k, v in disk.items()},
                    seconds=_seconds(shape, opts, on_gpu, procs, disk["download"]), devices=list(devices),
                    phases=phases, dtype=dtype, batch_size=bs)


def _seconds(shape: Shape, opts: Options, on_gpu: bool, procs: int, download: int) -> tuple[float, float]:
    """(fast, slow): forward flops 2 x params per token plus attention 2 T H hd; the statistics'
    products 2 d² per token for Σxxᵀ, Σyyᵀ, Σyxᵀ each; the loss probe ~L/2 passes over the held-out
    blocks; evaluation one forward of the base and of each output over its tokens."""
    d, L = shape.hidden, shape.layers
    tokens = opts.num_samples * opts.seq_len
    attn = 2 * opts.seq_len * shape.heads * shape.head_dim
    fwd_layer = 2 * shape.layer_params + attn  # per token
    forward = tokens * L * fwd_layer
    products = tokens * L * 3 * 2 * d * d
    if opts.criterion == "loss":
        held = holdout_count(opts.num_samples, opts.holdout_fraction) * opts.seq_len
        forward += held * (L * L / 2 * fwd_layer + (L + 1) * 2 * shape.embed_params)
    eval_tokens = len(opts.perplexity) * (opts.eval_max_tokens or EVAL_TOKENS_PER_CORPUS)
    eval_tokens += len(opts.tasks) * (opts.eval_limit or TASK_DOCS) * TASK_TOKENS_PER_DOC
    evaluation = (1 + len(opts.ks)) * eval_tokens * (L * fwd_layer + 2 * shape.embed_params)
    out = []
    for i in (1, 0):  # the fast end, then the slow end
        if on_gpu:  # calibration is split between the processes; evaluation runs in one
            compute = (forward / GPU_FORWARD_FLOPS[i] + products / GPU_PRODUCT_FLOPS[i]) / procs
            compute += evaluation / GPU_FORWARD_FLOPS[i]
        else:
            compute = (forward + products) / CPU_FLOPS[i] / procs + evaluation / CPU_FLOPS[i]
        out.append(compute + download / DOWNLOAD_BPS[i] + STARTUP_S[1 - i])
    return round(out[0], 1), round(out[1], 1)
