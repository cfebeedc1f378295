"""The client commands of `nbl`: submit a job to the API and wait for it.

    nbl submit [FILE] [flags]           POST /v1/jobs; FILE is YAML or JSON, flags override it
    nbl wait JOB                        poll until the job ends: exit 0 succeeded, 1 failed,
                                        2 cancelled, 3 timeout, 4 the API refused (unknown job, bad key)

They read NBL_API_URL (default http://127.0.0.1:8000) and NBL_API_KEY; registered by
service/cli.py's add_service_commands.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

DEFAULT_API_URL = "http://127.0.0.1:8000"
EXIT = {"succeeded": 0, "failed": 1, "cancelled": 2}
EXIT_TIMEOUT, EXIT_API = 3, 4


def add_client_commands(sub) -> None:
    p = sub.add_parser("submit", help="submit a compression job to the API",
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
    _client_args(p)
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("wait", help="wait for a job to end; exit 0 succeeded, 1 failed, 2 cancelled, 3 timeout")
    p.add_argument("job", help="job id")
    p.add_argument("--timeout", type=float, default=0, help="seconds (0: no limit)")
    p.add_argument("--interval", type=float, default=1.0, help="first polling interval; it backs off to 15 s")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    _client_args(p)
    p.set_defaults(func=cmd_wait)


def _client_args(p) -> None:
    p.add_argument("--api-url", default=None, help=f"default $NBL_API_URL or {DEFAULT_API_URL}")
    p.add_argument("--api-key", default=None, help="default $NBL_API_KEY")
    p.add_argument("--json", action="store_true", help="print the job as JSON")


class ApiError(Exception):
    def __init__(self, status: int, problem: dict):
        self.status, self.problem = status, problem
        super().__init__(format_problem(status, problem))


def format_problem(status: int, problem: dict) -> str:
    text = f"{problem.get('title', 'error')} ({status})"
    if problem.get("detail"):
        text += f": {problem['detail']}"
    for e in (problem.get("errors") or [])[1:]:
        text += f"\n  {'.'.join(str(x) for x in e.get('loc', []))}: {e.get('msg')}"
    return text


def _client(args):
    import httpx

    key = args.api_key or os.environ.get("NBL_API_KEY")
    if not key:
        raise ValueError("no API key: set NBL_API_KEY or pass --api-key (see `nbl admin create-key`)")
    url = args.api_url or os.environ.get("NBL_API_URL") or DEFAULT_API_URL
    return httpx.Client(base_url=url.rstrip("/"), headers={"Authorization": f"Bearer {key}"}, timeout=30)


def _json_or_error(resp) -> dict:
    try:
        body = resp.json()
    except ValueError:
        body = {"title": resp.reason_phrase, "detail": resp.text[:500]}
    if resp.status_code >= 400:
        raise ApiError(resp.status_code, body)
    return body


def build_request(args) -> dict[str, Any]:
    """The request body: the file (if any), then each flag given on top of it."""
    body: dict[str, Any] = {}
    if args.file:
        import yaml

        loaded = yaml.safe_load(args.file.read_text())
        if not isinstance(loaded, dict):
            raise ValueError(f"{args.file}: expected a mapping (the job request body)")
        body = loaded

    def put(section: str, key: str, value) -> None:
        if value is not None:
            body.setdefault(section, {})
            if not isinstance(body[section], dict):
                raise ValueError(f"{section} must be a mapping")
            body[section][key] = value

    put("model", "id", args.model)
    put("model", "revision", args.revision)
    put("calibration", "dataset", args.dataset)
    put("calibration", "config", args.dataset_config)
    put("calibration", "split", args.split)
    put("calibration", "text_field", args.text_field)
    put("calibration", "num_samples", args.num_samples)
    put("calibration", "seq_len", args.seq_len)
    put("calibration", "seed", args.seed)
    put("calibration", "shuffle", args.shuffle)
    put("compression", "mode", args.mode)
    put("compression", "method", args.method)
    put("compression", "criterion", args.criterion)
    if args.k is not None:
        try:
            ks = [int(x) for x in args.k.split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"--k must be an integer or a comma-separated list, got {args.k!r}") from None
        put("compression", "k", ks[0] if len(ks) == 1 else ks)
    if args.perplexity is not None:
        put("evaluation", "perplexity", [] if args.perplexity == "none" else _names(args.perplexity))
    if args.tasks is not None:
        put("evaluation", "tasks", _names(args.tasks))
    put("evaluation", "limit", args.limit)
    put("evaluation", "speed", args.speed)
    if args.publish_repo and args.local_dir:
        raise ValueError("give --publish-repo or --local-dir, not both")
    if args.publish_repo:
        body["publish"] = {"repo_id": args.publish_repo}
        put("publish", "private", None if args.public is None else not args.public)
        put("publish", "revision", args.publish_revision)
        put("publish", "create_pr", args.create_pr)
    elif args.local_dir:
        body["publish"] = {"local_dir": args.local_dir}
    for item in args.metadata:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--metadata takes KEY=VALUE, got {item!r}")
        put("metadata", key, value)
    if "model" not in body:
        raise ValueError("give --model or a request file")
    return body


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def cmd_submit(args) -> int:
    import httpx

    body = build_request(args)
    key = args.idempotency_key or f"nbl-cli-{uuid.uuid4().hex}"
    with _client(args) as client:
        for attempt in range(4):  # retries are safe: the same Idempotency-Key gives the same job
            try:
                resp = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": key})
            except httpx.TransportError as e:
                if attempt == 3:
                    print(f"nbl: cannot reach the API at {client.base_url}: {e}", file=sys.stderr)
                    return 1
            else:
                if resp.status_code < 500 or attempt == 3:
                    break
            time.sleep(0.5 * 2**attempt)
        try:
            job = _json_or_error(resp)
        except ApiError as e:
            print(f"nbl: {e}", file=sys.stderr)
            return 1
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
    import httpx

    deadline = time.monotonic() + args.timeout if args.timeout > 0 else None
    interval, last_event = max(args.interval, 0.05), None
    show, job = not args.quiet, None
    try:
        client = _client(args)
    except ValueError as e:  # no key: not exit 2, which means "cancelled" here
        print(f"nbl: error: {e}", file=sys.stderr)
        return EXIT_API
    with client:
        while True:
            try:
                job = _json_or_error(client.get(f"/v1/jobs/{args.job}"))
                events = _json_or_error(client.get(f"/v1/jobs/{args.job}/events",
                                                   params={} if last_event is None else {"after": last_event}))
            except ApiError as e:
                print(f"nbl: {e}", file=sys.stderr)
                return EXIT_API
            except httpx.TransportError as e:
                if show:
                    print(f"nbl: API unreachable ({e}); retrying", file=sys.stderr)
            else:
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
                state = job["status"] if job else "unknown (API unreachable)"
                print(f"nbl: timed out after {args.timeout:g} s; job {args.job} is {state}", file=sys.stderr)
                return EXIT_TIMEOUT
            sleep = interval if deadline is None else min(interval, max(deadline - time.monotonic(), 0))
            time.sleep(sleep)
            interval = min(interval * 1.5, 15.0)

