"""The client commands of `nbl`: submit a job to the API and wait for it.

    nbl submit [FILE] [flags]           POST /v1/jobs; FILE is YAML or JSON, flags override it
    nbl wait JOB                        poll until the job ends, exit by its state

They read NBL_API_URL (default http://127.0.0.1:8000) and NBL_API_KEY; registered by
service/cli.py's add_service_commands. Retries, Retry-After and the connect timeout live in
service/http_client.py; the request body in service/job_request.py. EXIT_CODES is the one table
of exit codes, shown in both commands' --help and in the README.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

from .http_client import Api, ApiError, Unavailable, check_api_url
from .job_request import build_request

DEFAULT_API_URL = "http://127.0.0.1:8000"
EXIT = {"succeeded": 0, "failed": 1, "cancelled": 2}
EXIT_TIMEOUT, EXIT_API = 3, 4  # 2 is also a usage error: argparse, and ValueError in nbl's main
EXIT_CODES = """exit codes (nbl submit, nbl wait):
  0  submit: the job was accepted; wait: the job succeeded
  1  wait: the job failed
  2  wait: the job was cancelled; both: a usage error (bad flag, request file or API URL), one line on stderr
  3  wait: the job did not end within --timeout; both: the API was unreachable for --connect-timeout
     seconds in a row, or still busy (429, 502, 503, 504; Retry-After is honoured) at --timeout
  4  the API refused the request (an invalid job, an unknown job, a bad key: any 4xx, or a 500),
     or no API key was given"""


class MissingKey(Exception):
    pass


def add_client_commands(sub) -> None:
    p = sub.add_parser("submit", help="submit a compression job to the API", epilog=EXIT_CODES,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Submit a job: a YAML/JSON file with the request body, and/or flags "
                       "(flags override the file). Prints the job.")
    p.add_argument("file", nargs="?", type=Path, help="YAML or JSON job request")
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
    p.add_argument("--criterion", choices=["cca", "nmse", "cosine", "loss"])
    p.add_argument("--k", help="K or K1,K2,...")
    p.add_argument("--perplexity", help="comma-separated corpora: wikitext2, c4 (`none` for none)")
    p.add_argument("--tasks", help="comma-separated lm-eval tasks")
    p.add_argument("--limit", type=int, help="first N documents of each task")
    p.add_argument("--speed", action="store_true", default=None)
    p.add_argument("--publish-repo", help="publish to this Hub repo (owner/name)")
    p.add_argument("--public", action="store_true", default=None, help="publish publicly (default private)")
    p.add_argument("--publish-revision")
    p.add_argument("--create-pr", action="store_true", default=None)
    p.add_argument("--local-dir", help="publish under NBL_PUBLISH_DIR/NAME on the server")
    p.add_argument("--metadata", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--idempotency-key", help="default: a fresh one, reused across this command's retries")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds to keep retrying while the API is busy (429/503...) (0: no limit; default 120)")
    _client_args(p)
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("wait", help="wait for a job to end; exit 0 succeeded, 1 failed, 2 cancelled, 3 timeout",
                       epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Poll the job until it ends; progress and events on stderr, the job on stdout.")
    p.add_argument("job", help="job id")
    p.add_argument("--timeout", type=float, default=0,
                   help="seconds for the job to end, retries while the API is busy included (0: no limit)")
    p.add_argument("--interval", type=float, default=1.0, help="first polling interval; it backs off to 15 s")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr (retries and errors are still said)")
    _client_args(p)
    p.set_defaults(func=cmd_wait)


def _client_args(p) -> None:
    p.add_argument("--api-url", default=None, help=f"default $NBL_API_URL or {DEFAULT_API_URL}")
    p.add_argument("--api-key", default=None, help="default $NBL_API_KEY")
    p.add_argument("--connect-timeout", type=float, default=60.0,
                   help="give up (exit 3) when the API is unreachable this many seconds in a row (default 60)")
    p.add_argument("--json", action="store_true", help="print the job as JSON")


def _api(args) -> Api:
    # A bad URL is a usage error (ValueError: exit 2), told before a missing key (exit 4).
    url = check_api_url(args.api_url or os.environ.get("NBL_API_URL") or DEFAULT_API_URL)
    key = args.api_key or os.environ.get("NBL_API_KEY")
    if not key:
        raise MissingKey("no API key: set NBL_API_KEY or pass --api-key (see `nbl admin create-key`)")
    return Api(url, key, connect_timeout=args.connect_timeout)


def _fail(code: int, error: Exception) -> int:
    print(f"nbl: {error}", file=sys.stderr)
    return code


def cmd_submit(args) -> int:
    body = build_request(args)  # a bad file or flag: ValueError, exit 2, before any request
    key = args.idempotency_key or f"nbl-cli-{uuid.uuid4().hex}"  # the same job across retries
    deadline = time.monotonic() + args.timeout if args.timeout > 0 else None
    try:
        with _api(args) as api:
            job = api.request("POST", "/v1/jobs", json=body, headers={"Idempotency-Key": key}, deadline=deadline)
    except Unavailable as e:
        return _fail(EXIT_TIMEOUT, e)
    except (ApiError, MissingKey) as e:
        return _fail(EXIT_API, e)
    if args.json:
        print(json.dumps(job, indent=2))
    else:
        print_job(job)
    return 0


def print_job(job: dict) -> None:
    spec = job.get("spec", {})
    comp = spec.get("compression", {})
    print(f"{job['id']}  {job['status']}" + (f"  ({job['stage']} {job['progress']:.0%})" if job.get("stage") else ""))
    print(f"  model {spec.get('model', {}).get('id')}  {comp.get('mode')}/{comp.get('method')}/{comp.get('criterion')} "
          f"k={comp.get('k')}")
    for sel in job.get("selected_layers") or []:
        print(f"  k={sel.get('k')}: layers {sel.get('layers')}")
    for a in job.get("artifacts") or []:
        print(f"  {a['kind']} k={a['k']}: {a['uri']}" + (f" @ {a['commit_sha'][:12]}" if a.get("commit_sha") else ""))
    if job.get("error"):
        print(f"  error ({job['error']['type']}): {job['error']['message']}")


def print_metrics(metrics: dict | None) -> None:
    if not metrics:
        return
    variants = sorted(metrics, key=lambda v: (v != "base", v))
    names = sorted({n for v in variants for n in metrics[v]})
    width = max(len(n) for n in names)
    print(f"\n{'metric':<{width}}  " + "  ".join(f"{v:>12}" for v in variants))
    for n in names:
        cells = [metrics[v].get(n) for v in variants]
        print(f"{n:<{width}}  " + "  ".join(f"{'-' if c is None else format(c, '.4g'):>12}" for c in cells))


def _fmt_eta(seconds: float | None) -> str:
    if seconds is None:
        return ""
    m, s = divmod(int(seconds), 60)
    return f"  eta {m}m{s:02d}s" if m else f"  eta {s}s"


def cmd_wait(args) -> int:
    deadline = time.monotonic() + args.timeout if args.timeout > 0 else None
    interval, last_event = max(args.interval, 0.05), None
    show = not args.quiet
    try:
        api = _api(args)
    except MissingKey as e:
        return _fail(EXIT_API, e)
    with api:
        while True:
            try:
                job = api.request("GET", f"/v1/jobs/{args.job}", deadline=deadline)
                events = api.request("GET", f"/v1/jobs/{args.job}/events", deadline=deadline,
                                     params={} if last_event is None else {"after": last_event})
            except Unavailable as e:
                return _fail(EXIT_TIMEOUT, e)
            except ApiError as e:
                return _fail(EXIT_API, e)
            last_event = events.get("last_id", last_event)
            if show:
                for ev in events["data"]:
                    if ev["kind"] in ("stage", "warning", "status"):
                        print(f"[{ev['created_at'][11:19]}] {ev['kind']}: {ev.get('message') or ev.get('stage')}",
                              file=sys.stderr)
                print(f"{job['status']:<10} {job.get('stage') or '':<10} {job['progress']:6.1%}"
                      f"{_fmt_eta(job.get('eta_seconds'))}", file=sys.stderr)
            if job["status"] in EXIT:
                if args.json:
                    print(json.dumps(job, indent=2))
                else:
                    print_job(job)
                    print_metrics(job.get("metrics"))
                return EXIT[job["status"]]
            if deadline is not None and time.monotonic() >= deadline:
                print(f"nbl: timed out after {args.timeout:g} s; job {args.job} is {job['status']}", file=sys.stderr)
                return EXIT_TIMEOUT
            sleep = interval if deadline is None else min(interval, max(deadline - time.monotonic(), 0))
            time.sleep(sleep)
            interval = min(interval * 1.5, 15.0)
