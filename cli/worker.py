"""`nbl worker` (a Celery worker for compression jobs, with the reconcile loop beside it) and
`nbl import-gguf` (a GGUF file as a local:NAME checkpoint). The worker package loads inside them."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def add_import_gguf(sub) -> None:
    p = sub.add_parser(
        "import-gguf",
        help="convert a GGUF file into a safetensors checkpoint under NBL_MODELS_DIR (jobs use it as local:NAME)",
    )
    p.add_argument("path", type=Path, help="the .gguf file")
    p.add_argument("--name", required=True, help="the model's name under NBL_MODELS_DIR")
    p.add_argument(
        "--dtype",
        choices=("auto", "bfloat16", "float16", "float32"),
        default="auto",
        help="the weights' dtype (default auto: bfloat16 from a quantized GGUF, else the GGUF's own); "
        "outputs inherit it through publish.dtype auto",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_import_gguf)


def cmd_import_gguf(args) -> int:
    from service.core.settings import Settings
    from worker.engine.loading.gguf import convert_gguf

    if not args.path.is_file() or args.path.suffix != ".gguf":
        raise ValueError(f"not a .gguf file: {args.path}")
    if "/" in args.name or args.name.startswith("."):
        raise ValueError(f"--name must be a plain name, got {args.name!r}")
    out = convert_gguf(args.path, Settings().models_dir / args.name, dtype=args.dtype)
    cfg = json.loads((out / "config.json").read_text())
    dtype = cfg.get("dtype") or cfg.get("torch_dtype")  # an earlier import of the same name is reused as it is
    size = sum(f.stat().st_size for f in out.glob("*.safetensors"))
    if args.json:
        print(json.dumps({"model": f"local:{args.name}", "path": str(out), "dtype": dtype, "bytes": size}))
    else:
        print(f"local:{args.name} -> {out} ({dtype}, {size / 1e6:,.0f} MB)")
    return 0


def add_worker(sub) -> None:
    p = sub.add_parser(
        "worker",
        help="run a Celery worker for compression jobs (one job at a time); it also "
        "runs the reconcile loop (requeues jobs whose worker died)",
    )
    p.add_argument("--loglevel", default="INFO")
    p.add_argument(
        "--devices",
        metavar="LIST",
        help="torch devices jobs calibrate on, one process each, e.g. "
        "cuda:0,cuda:1 or cpu,cpu (default: NBL_DEVICES, else every visible GPU, else cpu)",
    )
    p.set_defaults(func=cmd_worker)


def cmd_worker(args) -> int:
    from service.jobs import reconcile_loop
    from worker.engine.devices import visible
    from worker.host.pool import install_solo_limits, pool_options
    from worker.tasks import celery, settings

    if args.devices is not None:
        settings.devices = args.devices  # the jobs this worker runs (forked or inline) read it here
    visible(settings.devices)  # a device this machine lacks: refused now (exit 2), not at the first job
    if sys.platform == "linux" and "glibc.malloc.hugetlb" not in os.environ.get("GLIBC_TUNABLES", ""):
        print(
            "nbl worker: GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (set in the worker image) makes CPU calibration "
            "faster; it must be set before the process starts (docs/operations.md, Configuration)",
            file=sys.stderr,
        )

    # solo on SQLite (it must never fork while holding SQLite state), else prefork: worker/host/pool.py
    pool = pool_options(settings)
    if "solo" in pool:
        install_solo_limits(settings)
    # a pass now, then every NBL_RECONCILE_INTERVAL: a restarted worker alone recovers the job its
    # predecessor lost (a thread of this process, not of the job's child)
    loop = reconcile_loop.start(settings, "worker")
    try:
        celery.worker_main(["worker", *pool, "--loglevel", args.loglevel, "-Q", ",".join(own_queues(settings))])
    finally:
        loop.close()
    return 0


def own_queues(settings) -> list[str]:
    """The queues of the worker classes this worker's devices can serve (worker/host/capacity.py): a CPU-only
    worker consumes the CPU class's queue alone, so it never receives a job sized for a GPU."""
    from service.estimates.jobs import classes
    from worker.host.capacity import own, queues

    _, me = own(getattr(settings, "devices", None))
    return queues(settings.queue_name, classes(settings), me)
