"""The service's administration commands, and the one database-session helper (`db_session`) that
every `nbl admin` command uses. cli/main.py wires them in; the commands:

    nbl admin create-key, list-keys, revoke-key, rotate-key   teams and API keys (cli/keys.py)
    nbl admin migrate                   alembic upgrade head
    nbl admin dispatch                  re-send queued jobs the broker may not hold (the reconciler)
    nbl admin set-hub-token --team N    store the team's Hub token, encrypted (from $NBL_HUB_TOKEN or stdin)
    nbl admin gen-secret-key            a new NBL_SECRET_KEY
    nbl admin webhook-secret --team N   create or rotate the team's webhook signing secret (printed once)
    nbl admin deliver-webhooks          send the webhook deliveries that are due (one pass)
    nbl admin gc [--dry-run] [--json]   free scratch of ended jobs, the stats cache over its cap (cli/outputs.py)
    nbl admin migrate-outputs           move old flat-layout local outputs under their team (cli/outputs.py)
    nbl reconcile [--once] [--interval S]  requeue jobs whose worker died, fail poison jobs, re-send
                                        jobs the broker lost (service/jobs/reconciler.py)
    nbl serve [--host H --port P]       the HTTP API (uvicorn; cli/serve.py)
    nbl submit, wait, jobs, cancel, logs  the API's client (cli/client/commands.py, over nbl_client)

Nothing heavy is imported at module level, so `nbl --help` stays instant.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def db_session(settings) -> Iterator:
    """The one way an admin command reaches the database: a Session on an engine of its own,
    disposed of on the way out (the command is the process: no pool outlives it)."""
    from service.core.db import make_engine, make_sessionmaker

    engine = make_engine(settings)
    try:
        with make_sessionmaker(engine)() as session:
            yield session
    finally:
        engine.dispose()


def migrated_settings(announce: bool = False):
    """Settings, with the schema created on a fresh database and refused when out of date."""
    from service.core.migrate import ensure_schema
    from service.core.settings import Settings

    settings = Settings()
    if ensure_schema(settings) == "created" and announce:
        print(f"database: {safe_url(settings.database_url)} (migrated)")
    return settings


def add_admin_commands(asub) -> None:
    """The `nbl admin` commands of this module (cli/keys.py and cli/outputs.py add theirs)."""
    p = asub.add_parser("migrate", help="upgrade the database schema to the latest revision")
    p.set_defaults(func=cmd_migrate)
    p = asub.add_parser(
        "dispatch", help="re-send queued jobs that never reached the broker, and jobs whose worker died"
    )
    p.add_argument(
        "--stale-after",
        type=float,
        default=3600,
        help="also re-send jobs queued and dispatched more than this many seconds ago",
    )
    p.set_defaults(func=cmd_dispatch)
    p = asub.add_parser(
        "set-hub-token",
        help="store a team's Hugging Face Hub write token, encrypted",
        description="Reads the token from $NBL_HUB_TOKEN, else from stdin (never from the command "
        "line, which other users can see); stores it encrypted. Jobs of the team publish with it "
        "unless they bring their own publish.token.",
    )
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


def add_reconcile(sub) -> None:
    p = sub.add_parser(
        "reconcile",
        help="run the reconciler: requeue jobs whose worker died, fail poison jobs, re-send jobs the broker lost",
        description="A pass every --interval seconds (default $NBL_RECONCILE_INTERVAL or 30); "
        "see service/jobs/reconciler.py.",
    )
    p.add_argument("--once", action="store_true", help="one pass, then exit (1 if it failed)")
    p.add_argument("--interval", type=float, default=None, help="seconds between passes")
    p.set_defaults(func=cmd_reconcile)


# --- the commands -----------------------------------------------------------------------------------


def cmd_migrate(args) -> int:
    from service.core.migrate import upgrade
    from service.core.settings import Settings

    settings = Settings()
    if settings.database_is_sqlite:
        settings.ensure_dirs()
    upgrade(settings.database_url)
    print(f"database: {safe_url(settings.database_url)} at head")
    return 0


MAX_STALE_AFTER_S = 10 * 365 * 86400  # far past any queue; now minus more overflowed the datetime (a traceback)
MAX_INTERVAL_S = 86400.0  # a wait longer than the platform's timeout (inf) was a traceback, nan never slept


def seconds(value: float, flag: str, high: float, *, zero: bool) -> float:
    """A number of seconds up to `high`, from 0 (or above it, unless `zero`); NaN fails either comparison."""
    if not ((value >= 0 if zero else value > 0) and value <= high):
        raise ValueError(
            f"{flag} must be {'from 0 to' if zero else 'above 0 and at most'} {high:,.0f} seconds, got {value:g}"
        )
    return value


def cmd_dispatch(args) -> int:
    from service.core.celery_app import make_celery
    from service.core.settings import Settings
    from service.jobs.queue import dispatch_queued

    seconds(args.stale_after, "--stale-after", MAX_STALE_AFTER_S, zero=True)
    settings = Settings()
    celery = make_celery(settings)
    try:
        with db_session(settings) as session:
            sent = dispatch_queued(session, celery, stale_after_s=args.stale_after)
    finally:
        celery.close()
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
    from nbl.plain_text import secret_token
    from service.core.secrets import encrypt
    from service.core.settings import Settings
    from service.keys.auth import set_team_hub_token

    settings = Settings()
    # Checked as a job's publish.token is: a non-UTF-8 byte in $NBL_HUB_TOKEN was a surrogate, and a traceback at encrypt
    token = None if args.clear else secret_token(read_secret("NBL_HUB_TOKEN", "Hub token: "))
    ciphertext = None if token is None else encrypt(settings, token)
    with db_session(settings) as session:
        set_team_hub_token(session, args.team, ciphertext)
    print(f"team: {args.team}: Hub token {'removed' if args.clear else 'stored (encrypted)'}")
    return 0


def cmd_gen_secret_key(args) -> int:
    from service.core.secrets import generate_key

    print(generate_key())
    return 0


def cmd_webhook_secret(args) -> int:
    from sqlalchemy import select

    from service.core.models import Team
    from service.core.settings import Settings
    from service.webhooks.signing import set_team_secret

    settings = Settings()
    with db_session(settings) as session:
        team = session.scalar(select(Team).where(Team.name == args.team))
        if team is None:
            raise ValueError(f"no team {args.team!r} (`nbl admin create-key --team NAME --create-team` creates one)")
        secret = set_team_secret(session, settings, team.id)
    print(f"team: {args.team}: webhook secret set; earlier secrets no longer sign. Shown once, store it now:")
    print(secret)
    return 0


def cmd_deliver_webhooks(args) -> int:
    from service.core.settings import Settings
    from service.webhooks.delivery import deliver_due

    settings = Settings()
    with db_session(settings) as session:
        counts = deliver_due(session, settings)
    print("webhooks: " + (", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none due"))
    return 0


def cmd_reconcile(args) -> int:
    import logging

    from service.core.settings import Settings
    from service.jobs import reconciler

    settings = Settings()
    logging.getLogger("service").setLevel(logging.INFO)  # its log lines are the point of the process
    interval = args.interval if args.interval is not None else settings.reconcile_interval_s
    seconds(
        interval, "--interval" if args.interval is not None else "NBL_RECONCILE_INTERVAL", MAX_INTERVAL_S, zero=False
    )
    try:
        return reconciler.run(settings, interval_s=interval, once=args.once)
    except KeyboardInterrupt:
        return 0


def safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
