"""The service's commands for the `nbl` entry point (wired in worker/cli.py):

    nbl admin create-key --team NAME    a new API key (creates the team, migrates a fresh DB)
    nbl admin migrate                   alembic upgrade head
    nbl admin dispatch                  re-send queued jobs the broker may not hold (the reconciler)
    nbl admin set-hub-token --team N    store the team's Hub token, encrypted (from $NBL_HUB_TOKEN or stdin)
    nbl admin gen-secret-key            a new NBL_SECRET_KEY
    nbl admin webhook-secret --team N   create or rotate the team's webhook signing secret (printed once)
    nbl admin deliver-webhooks          send the webhook deliveries that are due (one pass)
    nbl reconcile [--once] [--interval S]  requeue jobs whose worker died, fail poison jobs, re-send
                                        jobs the broker lost (service/reconciler.py)
    nbl serve [--host H --port P]       the HTTP API (uvicorn)
    nbl submit [FILE] [flags]           POST /v1/jobs; FILE is YAML or JSON, flags override it
    nbl wait JOB                        poll until the job ends: exit 0 succeeded, 1 failed,
                                        2 cancelled, 3 timeout, 4 the API refused (unknown job, bad key)

The client commands read NBL_API_URL (default http://127.0.0.1:8000) and NBL_API_KEY.
Nothing heavy is imported at module level, so `nbl --help` stays instant.
"""

from __future__ import annotations

import argparse
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


def add_service_commands(sub) -> None:
    admin = sub.add_parser("admin", help="administer the service: API keys, migrations, the reconciler")
    asub = admin.add_subparsers(dest="admin_command", required=True)
    p = asub.add_parser("create-key", help="create an API key for a team (the team too, if new)")
    p.add_argument("--team", required=True, help="team name")
    p.add_argument("--name", help="a label for the key")
    p.set_defaults(func=cmd_create_key)
    p = asub.add_parser("migrate", help="upgrade the database schema to the latest revision")
    p.set_defaults(func=cmd_migrate)
    p = asub.add_parser("dispatch", help="re-send queued jobs that never reached the broker, and jobs whose worker died")
    p.add_argument("--stale-after", type=float, default=3600,
                   help="also re-send jobs queued and dispatched more than this many seconds ago")
    p.set_defaults(func=cmd_dispatch)
    p = asub.add_parser("set-hub-token", help="store a team's Hugging Face Hub write token, encrypted",
                        description="Reads the token from $NBL_HUB_TOKEN, else from stdin (never from the command "
                        "line, which other users can see); stores it encrypted. Jobs of the team publish with it "
                        "unless they bring their own publish.token.")
    p.add_argument("--team", required=True, help="team name")
    p.add_argument("--clear", action="store_true", help="remove the team's token instead")
    p.set_defaults(func=cmd_set_hub_token)
    p = asub.add_parser("gen-secret-key", help="print a new key for NBL_SECRET_KEY (encrypts Hub tokens at rest)")
    p.set_defaults(func=cmd_gen_secret_key)
    p = asub.add_parser("webhook-secret", help="create or rotate a team's webhook signing secret (printed once)")
    p.add_argument("--team", required=True, help="team name")
    p.set_defaults(func=cmd_webhook_secret)
    p = asub.add_parser("deliver-webhooks", help="send the webhook deliveries that are due (one pass)")
    p.set_defaults(func=cmd_deliver_webhooks)

    p = sub.add_parser("reconcile", help="run the reconciler: requeue jobs whose worker died, fail poison jobs, "
                       "re-send jobs the broker lost",
                       description="A pass every --interval seconds (default $NBL_RECONCILE_INTERVAL or 30); "
                       "see service/reconciler.py.")
    p.add_argument("--once", action="store_true", help="one pass, then exit (1 if it failed)")
    p.add_argument("--interval", type=float, default=None, help="seconds between passes")
    p.set_defaults(func=cmd_reconcile)

    p = sub.add_parser("serve", help="run the HTTP API")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--log-level", default="info")
    p.set_defaults(func=cmd_serve)

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


# --- admin and serve -----------------------------------------------------------------------------


def cmd_create_key(args) -> int:
    from .auth import create_key, get_or_create_team
    from .db import make_engine, make_sessionmaker
    from .migrate import ensure_schema
    from .settings import Settings

    settings = Settings()
    schema = ensure_schema(settings)
    engine = make_engine(settings)
    try:
        with make_sessionmaker(engine)() as session:
            team, created = get_or_create_team(session, args.team)
            key, row = create_key(session, team, args.name)
    finally:
        engine.dispose()
    if schema == "created":
        print(f"database: {_safe_url(settings.database_url)} (migrated)")
    print(f"team: {team.name} ({'created' if created else 'existing'})")
    print(f"key {row.prefix}... created; it is shown once, store it now:")
    print(key)
    return 0


def cmd_migrate(args) -> int:
    from .migrate import upgrade
    from .settings import Settings

    settings = Settings()
    if settings.database_is_sqlite:
        settings.ensure_dirs()
    upgrade(settings.database_url)
    print(f"database: {_safe_url(settings.database_url)} at head")
    return 0


def cmd_dispatch(args) -> int:
    from .celery_app import make_celery
    from .db import make_engine, make_sessionmaker
    from .queue import dispatch_queued
    from .settings import Settings

    settings = Settings()
    engine = make_engine(settings)
    celery = make_celery(settings)
    try:
        with make_sessionmaker(engine)() as session:
            sent = dispatch_queued(session, celery, stale_after_s=args.stale_after)
    finally:
        celery.close()
        engine.dispose()
    print(f"re-sent {len(sent)} job(s)" + "".join(f"\n  {j}" for j in sent))
    return 0


def read_secret(env_var: str, prompt: str) -> str:
    """A secret from the environment, else stdin (a hidden prompt on a terminal); never argv."""
    value = os.environ.get(env_var)
    if value is None:
        if sys.stdin.isatty():
            import getpass

            value = getpass.getpass(prompt)
        else:
            value = sys.stdin.readline()
    value = value.strip()
    if not value:
        raise ValueError(f"no secret given: set {env_var} or pipe it on stdin")
    return value


def cmd_set_hub_token(args) -> int:
    from .auth import set_team_hub_token
    from .db import make_engine, make_sessionmaker
    from .secrets import encrypt
    from .settings import Settings

    settings = Settings()
    ciphertext = None if args.clear else encrypt(settings, read_secret("NBL_HUB_TOKEN", "Hub token: "))
    engine = make_engine(settings)
    try:
        with make_sessionmaker(engine)() as session:
            set_team_hub_token(session, args.team, ciphertext)
    finally:
        engine.dispose()
    print(f"team: {args.team}: Hub token {'removed' if args.clear else 'stored (encrypted)'}")
    return 0


def cmd_gen_secret_key(args) -> int:
    from .secrets import generate_key

    print(generate_key())
    return 0


def cmd_webhook_secret(args) -> int:
    from sqlalchemy import select

    from .db import make_engine, make_sessionmaker
    from .models import Team
    from .settings import Settings
    from .webhooks import set_team_secret

    settings = Settings()
    engine = make_engine(settings)
    try:
        with make_sessionmaker(engine)() as session:
            team = session.scalar(select(Team).where(Team.name == args.team))
            if team is None:
                raise ValueError(f"no team {args.team!r} (`nbl admin create-key --team NAME` creates one)")
            secret = set_team_secret(session, settings, team.id)
    finally:
        engine.dispose()
    print(f"team: {args.team}: webhook secret set; earlier secrets no longer sign. Shown once, store it now:")
    print(secret)
    return 0


def cmd_deliver_webhooks(args) -> int:
    from .db import make_engine, make_sessionmaker
    from .settings import Settings
    from .webhooks import deliver_due

    settings = Settings()
    engine = make_engine(settings)
    try:
        with make_sessionmaker(engine)() as session:
            counts = deliver_due(session, settings)
    finally:
        engine.dispose()
    print("webhooks: " + (", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none due"))
    return 0


def cmd_serve(args) -> int:
    import uvicorn

    from .api import create_app
    from .migrate import ensure_schema
    from .settings import Settings

    settings = Settings()
    ensure_schema(settings)
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level=args.log_level)
    return 0


def cmd_reconcile(args) -> int:
    import logging

    from . import reconciler
    from .settings import Settings

    settings = Settings()
    logging.getLogger("service").setLevel(logging.INFO)  # its log lines are the point of the process
    interval = args.interval if args.interval is not None else settings.reconcile_interval_s
    if interval <= 0:
        raise ValueError("--interval must be positive")
    try:
        return reconciler.run(settings, interval_s=interval, once=args.once)
    except KeyboardInterrupt:
        return 0


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


# --- client --------------------------------------------------------------------------------------


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


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (`python -m service.cli ...`); `nbl` wires add_service_commands itself."""
    import logging

    parser = argparse.ArgumentParser(prog="nbl", description="nbl-service: the service commands")
    sub = parser.add_subparsers(dest="command", required=True)
    add_service_commands(sub)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except ValueError as e:
        print(f"nbl: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
