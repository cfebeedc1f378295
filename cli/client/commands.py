"""The client commands of `nbl`, over the Python client nbl_client (clients/python):

    nbl submit [FILE|-] [flags] [--wait]   POST /v1/jobs; FILE is YAML or JSON (- for stdin), flags override it
    nbl wait JOB                           poll until the job ends, exit by its state
    nbl jobs [--status S] [--metadata K=V] list the team's jobs, newest first
    nbl cancel JOB                         cancel a queued or running job
    nbl logs JOB [--follow]                the job's events
    nbl download JOB [--k K] DIR           a local output's files, sha256-checked (cli/client/download.py)
    nbl models, nbl usage                  what the team can run, what it used (cli/client/catalog.py)

They read NBL_API_URL (default http://127.0.0.1:8000) and NBL_API_KEY; registered by
cli/admin.py's add_service_commands. Retries, Retry-After and the connect timeout live in
nbl_client.http; the request body in cli/client/job_request.py. EXIT_CODES is the one table of exit
codes, shown in every command's --help and in docs/cli.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from pathlib import Path

from cli.client import jobs as client_commands
from cli.client.catalog import add_catalog
from cli.client.download import add_download
from cli.client.format import job_lines
from cli.client.job_request import build_request
from cli.client.wait import failed, wait_for
from cli.compress_options import schemes_arg
from cli.gates import parse_gate
from cli.refine_options import add_refine_options
from nbl_client import DEFAULT_URL, ApiError, Client, MissingKey, Unavailable

DEFAULT_API_URL = DEFAULT_URL
EXIT_CODES = """exit codes (nbl submit, wait, jobs, cancel, logs):
  0  submit: the job was accepted (with --wait: it succeeded); wait: the job succeeded;
     jobs, cancel, logs: done
  1  wait, submit --wait: the job failed (but not by its gates: 5)
  2  wait, submit --wait: the job was cancelled; all: a usage error (bad flag, request file or API
     URL), one line on stderr
  3  wait, submit --wait: the job did not end within --timeout; all: the API was unreachable for
     --connect-timeout seconds in a row, or still busy (429, 502, 503, 504; Retry-After is
     honoured) at --timeout
  4  the API refused the request (an invalid job or filter, an unknown job, a bad key, cancelling a
     finished job, or one that began publishing, which ends succeeded or failed: any 4xx, or a 500),
     or no API key was given
  5  wait, submit --wait: the job failed its quality gates (error.type quality: no output passed;
     nothing was published)"""


def _parser(sub, name: str, help: str, description: str):
    return sub.add_parser(
        name,
        help=help,
        description=description,
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_client_commands(sub) -> None:
    p = _parser(
        sub,
        "submit",
        "submit a compression job to the API",
        "Submit a job: a YAML/JSON file with the request body (`-`: read it from stdin), and/or flags "
        "(flags override the file). Prints the job; with --wait, waits for it as `nbl wait` does.",
    )
    p.add_argument("file", nargs="?", type=Path, help="YAML or JSON job request, or - for stdin")
    p.add_argument("--model", help="Hub repo id or local:NAME")
    p.add_argument("--revision")
    p.add_argument("--dataset")
    p.add_argument("--dataset-config")
    p.add_argument("--split")
    p.add_argument("--text-field")
    p.add_argument("--num-samples", type=int)
    p.add_argument("--seq-len", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--shuffle", action="store_true", default=None)
    p.add_argument("--mode", choices=["attn", "block"])
    p.add_argument("--method", choices=["nbl", "drop"])
    crit = ["cca", "nmse", "cosine", "loss", "greedy", "auto"]
    p.add_argument("--criterion", choices=crit, help="default: the server's (cosine); cca is the paper's CCA bound")
    p.add_argument("--form", choices=["nbl", "linear", "fold"], help="how outputs are written, so where they run")
    p.add_argument("--k", help="K or K1,K2,..., or auto with --max-ppl-increase")
    p.add_argument("--max-ppl-increase", type=float, metavar="F", help="k auto: the largest k within this rise")
    p.add_argument("--selection-dataset", help="the data greedy, auto and k auto measure on (not the evaluation's)")
    p.add_argument("--selection-split")
    p.add_argument("--selection-samples", type=int)
    p.add_argument("--perplexity", help="comma-separated corpora: wikitext2, c4 (`none` for none)")
    p.add_argument("--max-tokens", type=int, help="perplexity: score only the first N tokens of each corpus")
    p.add_argument("--tasks", help="comma-separated lm-eval tasks")
    p.add_argument("--limit", type=int, help="first N documents of each task")
    task = "your own task, a JSONL file as `nbl eval --task-file` takes it, sent and reported under its stem"
    p.add_argument("--task-file", nargs="+", action="extend", default=[], metavar="FILE", help=task)
    p.add_argument("--speed", action="store_true", default=None)
    add_refine_options(p, defaults=False)
    p.add_argument(
        "--gate",
        action="append",
        type=parse_gate,
        default=[],
        metavar="NAME:ppl:+X|NAME:acc:-X",
        help="a quality gate (repeatable), as `nbl compress --gate`: wikitext2:ppl:+10%%, arc_easy:acc:-0.02; "
        "an output that fails one is not published, none passing fails the job (exit 5 with --wait)",
    )
    p.add_argument("--publish-repo", help="publish to this Hub repo (owner/name)")
    p.add_argument("--public", action="store_true", default=None, help="publish publicly (default private)")
    p.add_argument("--publish-revision")
    p.add_argument("--create-pr", action="store_true", default=None)
    p.add_argument("--local-dir", help="publish under NBL_PUBLISH_DIR/<team>/NAME on the server")
    p.add_argument("--quantize", type=schemes_arg, metavar="SCHEME[,SCHEME]", help="publish.quantize (for vLLM)")
    p.add_argument("--webhook-url", help="POST the job's events here (signed with the team's secret)")
    p.add_argument("--metadata", action="append", default=[], metavar="KEY=VALUE", help="repeatable")
    p.add_argument("--idempotency-key", help="default: a fresh one, reused across this command's retries")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds to keep retrying while the API is busy (429/503...), default 120; with --wait, "
        "also for the job to end (default: no limit); 0: no limit",
    )
    p.add_argument("--wait", action="store_true", help="then wait for the job to end; exit by its state")
    _wait_args(p)
    _client_args(p)
    p.set_defaults(func=cmd_submit)

    p = _parser(
        sub,
        "wait",
        "wait for a job to end; exit 0 succeeded, 1 failed, 2 cancelled, 3 timeout, 5 failed its quality gates",
        "Poll the job until it ends: a line on stderr when something changes (and a heartbeat every "
        "60 s); then on stdout the job and its result as a table: the base, and for each output its "
        "value, delta and relative change (--json: the job as the API returns it). --junit FILE also "
        "writes a JUnit XML report for CI: one test case per gate check, else one per output.",
    )
    p.add_argument("job", help="job id")
    p.add_argument(
        "--timeout",
        type=float,
        default=0,
        help="seconds for the job to end, retries while the API is busy included (0: no limit)",
    )
    _wait_args(p)
    _client_args(p)
    p.set_defaults(func=cmd_wait)

    p = _parser(sub, "jobs", "list the team's jobs, newest first", "List jobs, newest first (one page).")
    p.add_argument("--status", action="append", default=[], help="queued, running, ... (repeatable or a,b)")
    p.add_argument(
        "--metadata",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only jobs whose metadata has KEY=VALUE (repeatable: all must match)",
    )
    p.add_argument("--limit", type=int, default=20, help="at most this many (1 to 100, default 20)")
    p.add_argument("--after", help="the cursor printed after a full page")
    _client_args(p, timeout=True)
    p.set_defaults(func=_run(client_commands.jobs))

    p = _parser(
        sub,
        "cancel",
        "cancel a queued or running job",
        "Cancel a job; prints its new status. A job "
        "that began publishing can no longer be cancelled (409, exit 4): it ends succeeded or failed.",
    )
    p.add_argument("job", help="job id")
    _client_args(p, timeout=True)
    p.set_defaults(func=_run(client_commands.cancel))

    p = _parser(
        sub,
        "logs",
        "print a job's events",
        "Print the job's events, oldest first (--json: one "
        "JSON object a line); --follow prints new ones until the job ends.",
    )
    p.add_argument("job", help="job id")
    p.add_argument("--follow", "-f", action="store_true")
    p.add_argument("--interval", type=float, default=1.0, help="first polling interval of --follow; backs off to 5 s")
    _client_args(p, timeout=True)
    p.set_defaults(func=_run(client_commands.logs))
    add_download(sub, _parser, _client_args, _run)
    add_catalog(sub, _parser, _client_args, _run)


def _wait_args(p) -> None:
    p.add_argument("--interval", type=float, default=1.0, help="first polling interval; it backs off to 15 s")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr (retries and errors are still said)")
    p.add_argument(
        "--verbose",
        dest="every_line",
        action="store_true",
        help="a progress line whenever the job's progress moves (default: one line per stage, and warnings)",
    )
    p.add_argument(
        "--junit",
        type=Path,
        metavar="FILE",
        help="write a JUnit XML report of the job to FILE (one "
        "test case per gate check, else per output; written on every exit code, an error case on 3 and 4)",
    )


def _client_args(p, timeout: bool = False) -> None:
    p.add_argument("--api-url", default=None, help=f"default $NBL_API_URL or {DEFAULT_API_URL}")
    p.add_argument("--api-key", default=None, help="default $NBL_API_KEY")
    p.add_argument(
        "--connect-timeout",
        type=float,
        default=60.0,
        help="give up (exit 3) when the API is unreachable this many seconds in a row (default 60)",
    )
    p.add_argument("--json", action="store_true", help="print the API's answer as JSON")
    if timeout:
        p.add_argument(
            "--timeout",
            type=float,
            default=120.0,
            help="seconds to keep retrying while the API is busy (0: no limit; default 120)",
        )


def _client(args) -> Client:
    # A bad URL is a usage error (ValueError: exit 2), told before a missing key (exit 4).
    return Client(args.api_url, args.api_key, connect_timeout=args.connect_timeout)


def _run(command):
    def run(args) -> int:
        try:
            client = _client(args)
        except MissingKey as e:
            return failed(e)
        with client:
            return command(client, args)

    return run


def cmd_submit(args) -> int:
    body = build_request(args)  # a bad file or flag: ValueError, exit 2, before any request
    return _run(lambda client, args: _submit(client, args, body))(args)


def _submit(client: Client, args, body: dict) -> int:
    timeout = 120.0 if args.timeout is None else args.timeout
    try:
        key = args.idempotency_key or f"nbl-cli-{uuid.uuid4().hex}"  # the same job across retries
        job = client.submit(body, idempotency_key=key, timeout=timeout or None)
    except (Unavailable, ApiError) as e:
        return failed(e)
    for warning in job.warnings:  # expensive defaults, said before the job runs (also with --quiet)
        print(f"warning: {warning}", file=sys.stderr)
    if not args.wait:
        print(
            json.dumps(job.model_dump(mode="json"), indent=2)
            if args.json
            else "\n".join(job_lines(job.model_dump(mode="json")))
        )
        return 0
    if not args.json:
        print(f"submitted {job.id}", file=sys.stderr)
    return wait_for(
        client,
        job.id,
        timeout=args.timeout or 0,
        interval=args.interval,
        quiet=args.quiet,
        as_json=args.json,
        junit=args.junit,
        verbose=args.every_line,
    )


def _wait(client: Client, args) -> int:
    return wait_for(
        client,
        args.job,
        timeout=args.timeout,
        interval=args.interval,
        quiet=args.quiet,
        as_json=args.json,
        junit=args.junit,
        verbose=args.every_line,
    )


cmd_wait = _run(_wait)
