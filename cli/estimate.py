"""`nbl estimate`: peak device and host memory, disk and time of `nbl compress` (or a job) with these
options, from the model's config.json alone: nothing else is read or downloaded, torch is not imported.

It takes every flag of `nbl compress` (one definition, cli/compress_options.py), so a compress command line
estimates as pasted; the flags that do not change the figures (the data set, seed, gates, cache) are accepted and
ignored. Its own: --device-memory, --host-memory, --job.

    nbl estimate --model meta-llama/Llama-3.1-70B --num-samples 256 --seq-len 2048 --k 8 --devices cuda:0
    nbl estimate --model ./dir-with-config.json --k 4 --out o --eval --json
"""

from __future__ import annotations

import argparse
import json
import math

from cli.compress_options import compress_arguments
from cli.refine_options import refine_from_args
from nbl import recipe as R

DEFAULT_K = [4]
OWN_HELP = {  # the shared flags whose compress help does not say what they do here
    "--model": "Hub repo id, local:NAME, or a directory holding config.json",
    "--k": "K or K1,K2,... (default 4), or auto (one output)",
    "--out": "outputs are saved (the directory is not written; a job always saves)",
    "--json": "print the estimate as JSON",
}
DTYPES = (
    "auto",
    "float32",
    "fp32",
    "bfloat16",
    "bf16",
    "float16",
    "fp16",
)  # worker/engine/loading/load.resolve_dtype's


def _gib(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        value = -1
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a positive number of GiB, got {text!r}")
    return int(value * 2**30)


def add_estimate(sub) -> None:
    p = sub.add_parser(
        "estimate",
        help="memory, disk and time a compression needs, from config.json alone",
        description="Estimate `nbl compress` with the same options (and the worker class a job "
        "with them goes to) from the model's config.json, before anything is downloaded. Every "
        "flag of nbl compress is accepted; those that do not change the figures are ignored.",
    )
    compress_arguments(p, k_required=False)
    p.epilog, p.formatter_class = None, argparse.HelpFormatter  # compress's exit codes are not estimate's
    for action in p._actions:
        if action.option_strings and action.option_strings[0] in OWN_HELP:
            action.help = OWN_HELP[action.option_strings[0]]
    p.add_argument(
        "--device-memory",
        type=_gib,
        metavar="GIB",
        help="each GPU's memory, with --devices: a model "
        "larger than one is spread over the GPUs, the host and disk as the worker does (default: "
        "assumed to fit one)",
    )
    p.add_argument("--host-memory", type=_gib, metavar="GIB", help="the host's memory, with --device-memory")
    p.add_argument(
        "--job",
        action="store_true",
        help="estimate a job (outputs saved, the whole model loaded, "
        "wikitext2 perplexity unless the evaluation flags ask otherwise) rather than nbl compress",
    )
    p.set_defaults(func=cmd_estimate, k=DEFAULT_K)


def _check(args) -> None:
    """The values compress refuses when it runs (engine config, recipe): refused here before any arithmetic."""
    for flag, value, least in (
        ("--num-samples", args.num_samples, 1),
        ("--seq-len", args.seq_len, 2),
        ("--batch-size", args.batch_size, 1),
        ("--greedy-width", args.greedy_width, 1),
        ("--selection-samples", args.selection_samples, 1),
        ("--host-cache-bytes", args.host_cache_bytes, 0),
    ):
        if value is not None and value < least:
            raise ValueError(f"{flag} must be at least {least}, got {value}")
    if any(k < 1 for k in args.k):
        raise ValueError(f"k must be positive, got {','.join(map(str, args.k))}")
    if (args.device_memory or args.host_memory) and _devices(args) is None:
        raise ValueError("--device-memory and --host-memory describe the devices of --devices (or --device): give them")
    if args.dtype not in DTYPES:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, got {args.dtype!r}")
    if args.quantize:  # what compress and a job's request refuse (publish.quantize's 422)
        from nbl.outputs.quant_schemes import form_error

        if (why := form_error(args.form or R.FORM, args.mode)) is not None:
            raise ValueError(f"--quantize: {why}")


def _devices(args) -> list[str] | None:
    """--devices, else --device unless auto; None: those of the worker class the job goes to."""
    text = args.devices or (args.device if args.device != "auto" else None)
    return [d.strip() for d in text.split(",") if d.strip()] if text else None


def cmd_estimate(args) -> int:
    from nbl.model.checks import config_problems
    from nbl.sizing.classes import gb, place, queue_of
    from nbl.sizing.job import as_json
    from nbl.sizing.model import estimate
    from nbl.sizing.options import Options
    from nbl.sizing.shapes import shape_of
    from nbl.sizing.spread import Memory
    from service.core.settings import Settings
    from service.estimates.configs import ConfigUnavailable, model_config
    from service.estimates.jobs import classes

    _check(args)
    settings = Settings()  # NBL_HOST_CACHE_BYTES among them: --host-cache-bytes's default, as nbl compress reads it
    host_cache_bytes = args.host_cache_bytes if args.host_cache_bytes is not None else settings.host_cache_bytes
    try:
        config = model_config(args.model, settings, args.revision, allow_dirs=True)
    except ConfigUnavailable as e:
        raise ValueError(str(e)) from None
    k_auto = args.k == []  # compress's `--k auto`
    # what compress refuses first, with the worker's words: the family, k, seq_len, the form (nbl/model/checks.py)
    problems = config_problems(config, [] if k_auto else args.k, args.seq_len, args.form, args.mode)
    if problems:
        raise ValueError(f"{args.model}: " + "; ".join(msg for _, msg in problems))
    shape = shape_of(config)
    evaluate = args.eval or args.job
    asked = args.perplexity or args.tasks or args.task_file or args.suite or args.speed
    perplexity = args.perplexity or ([] if asked else ["wikitext2"])  # as compress --eval: wikitext2 when nothing else
    tasks = [*args.tasks, *args.task_file]
    refit, heal = refine_from_args(args, args.form, args.method)
    opts = Options(
        refit=refit,
        heal=heal,
        num_samples=args.num_samples,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        mode=args.mode,
        method=args.method,
        criterion=args.criterion,
        form=args.form,
        ks=(1,) if k_auto else tuple(args.k),
        dtype=args.dtype,
        k_auto=k_auto,
        load_check=not args.no_load_check,
        greedy_width=args.greedy_width or settings.greedy_width,
        selection_samples=args.selection_samples if args.selection_dataset else None,  # else the held-out tenth
        stats_precision=args.stats_precision,
        host_cache_bytes=host_cache_bytes,
        outputs=args.out is not None or args.job,
        whole_model=evaluate,
        perplexity=tuple(perplexity) if evaluate else (),
        eval_max_tokens=args.max_tokens,
        tasks=tuple(tasks) if evaluate else (),
        eval_limit=args.limit,
        quantize=tuple(args.quantize or ()),
        save_dtype=args.save_dtype or ("auto" if args.job else None),  # a job's publish.dtype defaults to auto
        # an evaluating run (a job, compress --eval) quantizes the base too and evaluates every copy
        quantized_eval=bool(evaluate),
    )
    try:  # the config's numbers are bounded (shapes.BOUNDS); the flags are not: --num-samples 10**400 is a number
        placement = place(shape, opts, classes(settings), settings.task_time_limit_s)
        devices = _devices(args)
        est = (
            estimate(shape, opts, devices, Memory(args.device_memory, args.host_memory))
            if devices
            else placement.estimate
        )
    except OverflowError:
        raise ValueError("these options are too large to estimate (a figure overflows a float)") from None
    worker_class = queue_of(settings.queue_name, placement.cls) if placement.cls else None
    view = as_json(est, worker_class) | {"refusal": placement.reason or None}
    if args.json:
        print(json.dumps(view, indent=2))
        return 0
    print(
        f"{args.model}: {shape.layers} layers, d={shape.hidden}, {shape.params / 1e9:,.2f}B parameters; "
        f"{opts.num_samples} x {opts.seq_len} tokens, batch {est.batch_size}, {est.dtype}"
    )
    print(f"devices {','.join(est.devices)}")
    print(
        f"  peak device memory  {gb(est.device_bytes)} per device"
        + ("" if est.device_bytes else " (CPU: all on the host)")
    )
    print(f"  peak host memory    {gb(est.host_bytes)}")
    for name, phase in est.phases.items():
        print(f"    {name:<10} device {gb(phase['device'])}, host {gb(phase['host'])}")
    print(
        f"  disk                {gb(est.disk_bytes)}: "
        + ", ".join(f"{k} {gb(v)}" for k, v in est.disk.items() if v or k != "quantized")
    )
    lo, hi = est.seconds
    print(f"  time                {_hours(lo)} to {_hours(hi)}")
    print(f"worker class: {worker_class}" if worker_class else f"no worker class: {placement.reason}")
    return 0


def _hours(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min" if s >= 60 else f"{s:.0f} s"
