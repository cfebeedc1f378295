"""`nbl admin` commands for teams and API keys (registered by service/cli.py's add_service_commands).

    nbl admin create-key --team NAME    a new API key (creates the team, migrates a fresh DB)
"""

from __future__ import annotations


def add_key_commands(asub) -> None:
    p = asub.add_parser("create-key", help="create an API key for a team (the team too, if new)")
    p.add_argument("--team", required=True, help="team name")
    p.add_argument("--name", help="a label for the key")
    p.set_defaults(func=cmd_create_key)


def cmd_create_key(args) -> int:
    from .auth import create_key, get_or_create_team
    from .cli import safe_url
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
        print(f"database: {safe_url(settings.database_url)} (migrated)")
    print(f"team: {team.name} ({'created' if created else 'existing'})")
    print(f"key {row.prefix}... created; it is shown once, store it now:")
    print(key)
    return 0
