"""`nbl models` and `nbl usage`: what the team can run (GET /v1/models) and what it used (GET /v1/usage),
as a table or, with --json, the API's answer. Exit codes as cli/client/commands.py's EXIT_CODES."""

from __future__ import annotations

import json
import sys

from cli.client.format import readable
from cli.client.wait import failed
from nbl.outputs.quota import readable as size  # bytes in decimal units, as disks are sold: 8.6 GB
from nbl_client import ApiError, Client, Unavailable


def _shape(shape: dict | None) -> str:
    if not shape:
        return "shape unknown"
    params = shape.get("params")
    return (
        f"{shape.get('layers')} layers x {shape.get('hidden_size')}, {shape.get('heads')}/{shape.get('kv_heads')} "
        f"heads" + (f", {params / 1e6:,.0f}M params" if isinstance(params, int) else "")
    )


def models(client: Client, args) -> int:
    try:
        page = client.models(limit=args.limit, after=args.after, timeout=args.timeout or None)
    except (Unavailable, ApiError) as e:
        return failed(e)
    if args.json:
        print(json.dumps(page.model_dump(mode="json"), indent=2))
        return 0
    for m in page:
        on_disk = [size(m.size_bytes) + " on disk"] if m.size_bytes is not None else []
        used = [f"{m.jobs} recent job(s)"] if m.jobs is not None else []  # a local model's too (issue 38)
        where = ", ".join(on_disk + used) or "-"
        print(f"{m.id:40s}  {m.source or '-':5s}  {_shape(m.shape)}  ({where})")
    if page.has_more:
        print(f"(more: --after {page.next_cursor})", file=sys.stderr)
    return 0


def usage(client: Client, args) -> int:
    try:
        report = client.usage(limit=args.limit, after=args.after, timeout=args.timeout or None)
    except (Unavailable, ApiError) as e:
        return failed(e)
    if args.json:
        print(json.dumps(report.model_dump(mode="json"), indent=2))
        return 0
    quota = report.disk.get("quota_bytes")
    print(
        f"team {report.team}: outputs {size(report.disk.get('outputs_bytes') or 0)} on disk"
        + (f" of {size(quota)}" if quota else "")
    )
    for m in report:
        hours = ", ".join(f"{cls} {readable(h)} h" for cls, h in m.worker_hours.items()) or "no worker time"
        jobs = ", ".join(f"{n} {s}" for s, n in m.jobs.items() if s != "total")
        print(f"{m.month}  {m.jobs.get('total', 0)} jobs ({jobs})  {hours}  GPU {readable(m.gpu_hours)} h")
    if report.has_more:
        print(f"(more: --after {report.next_cursor})", file=sys.stderr)
    return 0


def add_catalog(sub, parser, client_args, run) -> None:
    """Registered by cli/client/commands.py with its helpers (parser with the epilog, common flags, client setup)."""
    p = parser(
        sub,
        "models",
        "list the models the team can run",
        "The server's local: models (with their shapes and sizes), then the Hub ids the team's recent jobs "
        "named (with the shape read at submit), one page.",
    )
    p.add_argument("--limit", type=int, default=50, help="at most this many (1 to 100, default 50)")
    p.add_argument("--after", help="the cursor printed after a full page")
    client_args(p, timeout=True)
    p.set_defaults(func=run(models))
    p = parser(
        sub,
        "usage",
        "the team's usage by month",
        "Jobs by status, worker-hours by worker class and GPU-hours per month (UTC), newest first, and the "
        "team's outputs on disk now.",
    )
    p.add_argument("--limit", type=int, default=12, help="at most this many months (1 to 120, default 12)")
    p.add_argument("--after", help="the cursor printed after a full page")
    client_args(p, timeout=True)
    p.set_defaults(func=run(usage))
