"""The service's commands for the `nbl` entry point (wired in cli/main.py). Registered here:

    nbl admin create-key, list-keys, revoke-key, rotate-key   teams and API keys (cli/keys.py)
    nbl admin migrate                   alembic upgrade head
    nbl admin dispatch                  re-send queued jobs the broker may not hold (the reconciler)
    nbl admin set-hub-token --team N    store the team's Hub token, encrypted (from $NBL_HUB_TOKEN or stdin)
    nbl admin gen-secret-key            a new NBL_SECRET_KEY
    nbl admin webhook-secret --team N   create or rotate the team's webhook signing secret (printed once)
    nbl admin deliver-webhooks          send the webhook deliveries that are due (one pass)
    nbl admin gc [--dry-run] [--json]   free scratch of ended jobs, the stats cache over its cap (service/outputs/gc.py)
    nbl admin migrate-outputs           move old flat-layout local outputs under their team (service/outputs/migration.py)
    nbl reconcile [--once] [--interval S]  requeue jobs whose worker died, fail poison jobs, re-send
                                        jobs the broker lost (service/jobs/reconciler.py)
    nbl serve [--host H --port P]       the HTTP API (uvicorn)
    nbl submit, wait, jobs, cancel, logs  the API's client (cli/client.py, over nbl_client)

Nothing heavy is imported at module level, so `nbl --help` stays instant.
"""

from __future__ import annotations

import argparse
import os
import sys

from cli.client import add_client_commands
from cli.keys import add_key_commands


def add_service_commands(sub) -> None:
    admin = sub.add_parser("admin", help="administer the service: API keys, migrations, the reconciler")
    asub = admin.add_subparsers(dest="admin_command", required=True)
    add_key_commands(asub)
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
    from service.outputs import gc, migration as outputs_migration  # nbl admin gc, migrate-outputs: modules of their own

    gc.add_command(asub)
    outputs_migration.add_command(asub)

    p = sub.add_parser("reconcile", help="run the reconciler: requeue jobs whose worker died, fail poison jobs, "
                       "re-send jobs the broker lost",
                       description="A pass every --interval seconds (default $NBL_RECONCILE_INTERVAL or 30); "
                       "see service/jobs/reconciler.py.")
    p.add_argument("--once", action="store_true", help="one pass, then exit (1 if it failed)")
    p.add_argument("--interval", type=float, default=None, help="seconds between passes")
    p.set_defaults(func=cmd_reconcile)

    p = sub.add_parser("serve", help="run the HTTP API")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--log-level", default="info")
    p.set_defaults(func=cmd_serve)

    add_client_commands(sub)


# --- admin and serve -----------------------------------------------------------------------------


def cmd_migrate(args) -> int:
    from service.core.migrate import upgrade
    from service.core.settings import Settings

    settings = Settings()
    if settings.database_is_sqlite:
        settings.ensure_dirs()
    upgrade(settings.database_url)
    print(f"database: {safe_url(settings.database_url)} at head")
    return 0


def cmd_dispatch(args) -> int:
    from service.core.celery_app import make_celery
    from service.core.db import make_engine, make_sessionmaker
    from service.jobs.queue import dispatch_queued
    from service.core.settings import Settings

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
    from service.keys.auth import set_team_hub_token
    from service.core.db import make_engine, make_sessionmaker
    from service.core.secrets import encrypt
    from service.core.settings import Settings

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
    from service.core.secrets import generate_key

    print(generate_key())
    return 0


def cmd_webhook_secret(args) -> int:
    from sqlalchemy import select

    from service.core.db import make_engine, make_sessionmaker
    from service.core.models import Team
    from service.core.settings import Settings
    from service.webhooks.signing import set_team_secret

    settings = Settings()
    engine = make_engine(settings)
    try:
        with make_sessionmaker(engine)() as session:
            team = session.scalar(select(Team).where(Team.name == args.team))
            if team is None:
                raise ValueError(f"no team {args.team!r} (`nbl admin create-key --team NAME --create-team` creates one)")
            secret = set_team_secret(session, settings, team.id)
    finally:
        engine.dispose()
    print(f"team: {args.team}: webhook secret set; earlier secrets no longer sign. Shown once, store it now:")
    print(secret)
    return 0


def cmd_deliver_webhooks(args) -> int:
    from service.core.db import make_engine, make_sessionmaker
    from service.core.settings import Settings
    from service.webhooks.delivery import deliver_due

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
    from cli.serve import serve

    return serve(args.host, args.port, args.log_level)


def cmd_reconcile(args) -> int:
    import logging

    from service.jobs import reconciler
    from service.core.settings import Settings

    settings = Settings()
    logging.getLogger("service").setLevel(logging.INFO)  # its log lines are the point of the process
    interval = args.interval if args.interval is not None else settings.reconcile_interval_s
    if interval <= 0:
        raise ValueError("--interval must be positive")
    try:
        return reconciler.run(settings, interval_s=interval, once=args.once)
    except KeyboardInterrupt:
        return 0


def safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
