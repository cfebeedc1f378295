"""`nbl jobs`, `nbl cancel JOB` and `nbl logs JOB [--follow]`: thin commands over nbl_client.

Each prints the API's answer (a table, or JSON with --json) and exits 0, 3 (the API unreachable or
busy) or 4 (refused: an unknown job, a bad key or filter, cancelling a finished or publishing job), as in
cli/client/commands.py's EXIT_CODES.
"""

from __future__ import annotations

import json
import sys

from cli.client.format import event_line, job_row
from cli.client.wait import failed
from nbl_client import ApiError, Client, Unavailable


def parse_pairs(items: list[str], flag: str = "--metadata") -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{flag} takes KEY=VALUE, got {item!r}")
        pairs[key] = value
    return pairs


def _guard(fn):
    """The exit code of an API failure, said in one line."""

    def run(client: Client, args) -> int:
        try:
            return fn(client, args)
        except (Unavailable, ApiError) as e:
            return failed(e)

    return run


@_guard
def jobs(client: Client, args) -> int:
    page = client.jobs(
        status=args.status or None,
        metadata=parse_pairs(args.metadata),
        limit=args.limit,
        after=args.after,
        timeout=args.timeout or None,
    )
    if args.json:
        print(json.dumps(page.model_dump(mode="json"), indent=2))
        return 0
    for job in page.data:
        print(job_row(job.model_dump(mode="json")))
    if page.has_more:
        print(f"(more: --after {page.next_cursor})", file=sys.stderr)
    return 0


@_guard
def cancel(client: Client, args) -> int:
    job = client.cancel(args.job, timeout=args.timeout or None)
    print(json.dumps(job.model_dump(mode="json"), indent=2) if args.json else f"{job.id}  {job.status}")
    return 0


@_guard
def logs(client: Client, args) -> int:
    """All events (page by page); with --follow, then new ones until the job ends (over the event
    stream; polling every --interval, backing off to 5 s, where the server has none)."""
    if args.follow:
        for ev in client.follow(args.job, interval=args.interval):
            print(
                json.dumps(ev.model_dump(mode="json")) if args.json else event_line(ev.model_dump(mode="json")),
                flush=True,
            )
        return 0
    after = None
    while True:
        page = client.events(args.job, after=after, limit=1000, timeout=args.timeout or None)
        for ev in page.data:
            print(
                json.dumps(ev.model_dump(mode="json")) if args.json else event_line(ev.model_dump(mode="json")),
                flush=True,
            )
        after = page.last_id if page.last_id is not None else after
        if not page.has_more:
            return 0
