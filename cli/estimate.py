"""`nbl estimate`: peak device and host memory, disk and time of `nbl compress` (or a job) with these
options, from the model's config.json alone: nothing else is read or downloaded, torch is not imported.

    nbl estimate --model meta-llama/Llama-3.1-70B --num-samples 256 --seq-len 2048 --k 8 --devices cuda:0
    nbl estimate --model ./dir-with-config.json --k 4 --out o --eval --json
"""

from __future__ import annotations

import argparse
import json
import math


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def _ks(text: str) -> list[int] | str:
    if text.strip() == "auto":
        return "auto"
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise argparse.ArgumentTypeError("give at least one k")
    return [_positive(p) for p in parts]


def _gib(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        value = -1
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a positive number of GiB, got {text!r}")
    return int(value * 2**30)


def _names(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def add_estimate(sub) -> None:
    p = sub.add_parser("estimate", help="memory, disk and time a compression needs, from config.json alone",
                       description="Estimate `nbl compress` with the same options (and the worker class a job "
                       "with them goes to) from the model's config.json, before anything is downloaded.")
    p.add_argument("--model", required=True, help="Hub repo id, local:NAME, or a directory holding config.json")
    p.add_argument("--revision", help="Hub revision")
    p.add_argument("--num-samples", type=_positive, default=256, help="calibration blocks (default 256)")
    p.add_argument("--seq-len", type=_positive, default=2048, help="tokens per block (default 2048)")
    p.add_argument("--batch-size", type=_positive, help="blocks per forward pass (default: nbl compress's)")
    p.add_argument("--mode", choices=["attn", "block"], default="attn")
    p.add_argument("--method", choices=["nbl", "drop"], default="nbl")
    p.add_argument("--criterion", choices=["cca", "nmse", "cosine", "loss", "greedy", "auto"], default="cca")
    p.add_argument("--k", type=_ks, default=[4], help="K or K1,K2,... (default 4), or auto (one output)")
    p.add_argument("--selection-samples", type=_positive, metavar="N",
                   help="selection blocks of greedy/auto/k auto (nbl compress --selection-samples with "
                   "--selection-dataset; default: the calibration's held-out tenth)")
    p.add_argument("--out", action="store_true", help="outputs are saved (as nbl compress --out; a job always does)")
    p.add_argument("--no-load-check", action="store_true", help="as nbl compress --no-load-check")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--stats-precision", choices=["auto", "float32", "tf32", "float64"], default="auto")
    p.add_argument("--host-cache-bytes", type=int, metavar="N", help="default: NBL_HOST_CACHE_BYTES, else no limit")
    p.add_argument("--devices", metavar="LIST", help="torch devices, one process each (cuda:0,cuda:1 or cpu); "
                   "default: those of the worker class the job goes to")
    p.add_argument("--device-memory", type=_gib, metavar="GIB", help="each GPU's memory, with --devices: a model "
                   "larger than one is spread over the GPUs, the host and disk as the worker does (default: "
                   "assumed to fit one)")
    p.add_argument("--host-memory", type=_gib, metavar="GIB", help="the host's memory, with --device-memory")
    p.add_argument("--job", action="store_true", help="estimate a job (outputs saved, the whole model loaded, "
                   "wikitext2 perplexity unless --perplexity says otherwise) rather than nbl compress")
    ev = p.add_argument_group("evaluation (as nbl compress --eval)")
    ev.add_argument("--eval", action="store_true", help="evaluate the base and each output")
    ev.add_argument("--perplexity", type=_names, default=None, metavar="CORPORA")
    ev.add_argument("--max-tokens", type=_positive)
    ev.add_argument("--tasks", type=_names, default=[], metavar="TASKS")
    ev.add_argument("--limit", type=_positive)
    p.add_argument("--json", action="store_true", help="print the estimate as JSON")
    p.set_defaults(func=cmd_estimate)


def cmd_estimate(args) -> int:
    from service.core.settings import Settings
    from service.estimates.classes import gb, place, queue_of
    from service.estimates.configs import ConfigUnavailable, model_config
    from service.estimates.jobs import as_json, classes
    from service.estimates.model import Options, estimate
    from service.estimates.shapes import shape_of
    from service.estimates.spread import Memory

    if args.host_cache_bytes is not None and args.host_cache_bytes < 0:
        raise ValueError(f"the host cache budget must be a number of bytes, got {args.host_cache_bytes}")
    settings = Settings()  # NBL_HOST_CACHE_BYTES among them: --host-cache-bytes's default, as nbl compress reads it
    host_cache_bytes = args.host_cache_bytes if args.host_cache_bytes is not None else settings.host_cache_bytes
    try:
        shape = shape_of(model_config(args.model, settings, args.revision, allow_dirs=True))
    except ConfigUnavailable as e:
        raise ValueError(str(e)) from None
    evaluate = args.eval or args.job
    perplexity = args.perplexity if args.perplexity is not None else (["wikitext2"] if evaluate else [])
    k_auto = args.k == "auto"
    opts = Options(
        num_samples=args.num_samples, seq_len=args.seq_len, batch_size=args.batch_size, mode=args.mode,
        method=args.method, criterion=args.criterion, ks=(1,) if k_auto else tuple(args.k), dtype=args.dtype,
        k_auto=k_auto, selection_samples=args.selection_samples, load_check=not args.no_load_check,
        greedy_width=settings.greedy_width,
        stats_precision=args.stats_precision, host_cache_bytes=host_cache_bytes,
        outputs=args.out or args.job, whole_model=evaluate,
        perplexity=tuple(perplexity) if evaluate else (), eval_max_tokens=args.max_tokens,
        tasks=tuple(args.tasks) if evaluate else (), eval_limit=args.limit)
    placement = place(shape, opts, classes(settings), settings.task_time_limit_s)
    worker_class = queue_of(settings.queue_name, placement.cls) if placement.cls else None
    devices = [d.strip() for d in args.devices.split(",") if d.strip()] if args.devices else None
    est = estimate(shape, opts, devices, Memory(args.device_memory, args.host_memory)) if devices else placement.estimate
    view = as_json(est, worker_class) | {"refusal": placement.reason or None}
    if args.json:
        print(json.dumps(view, indent=2))
        return 0
    print(f"{args.model}: {shape.layers} layers, d={shape.hidden}, {shape.params / 1e9:,.2f}B parameters; "
          f"{opts.num_samples} x {opts.seq_len} tokens, batch {est.batch_size}, {est.dtype}")
    print(f"devices {','.join(est.devices)}")
    print(f"  peak device memory  {gb(est.device_bytes)} per device" + ("" if est.device_bytes else " (CPU: all on the host)"))
    print(f"  peak host memory    {gb(est.host_bytes)}")
    for name, phase in est.phases.items():
        print(f"    {name:<10} device {gb(phase['device'])}, host {gb(phase['host'])}")
    print(f"  disk                {gb(est.disk_bytes)}: " + ", ".join(f"{k} {gb(v)}" for k, v in est.disk.items()))
    lo, hi = est.seconds
    print(f"  time                {_hours(lo)} to {_hours(hi)}")
    print(f"worker class: {worker_class}" if worker_class else f"no worker class: {placement.reason}")
    return 0


def _hours(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min" if s >= 60 else f"{s:.0f} s"
