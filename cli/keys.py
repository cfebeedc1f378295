"""`nbl admin` commands for teams and API keys (wired in by cli/main.py).

    nbl admin create-key --team NAME [--create-team]   a new key for a team (a new team only if asked)
    nbl admin list-keys [--team NAME] [--json]          id, prefix, team, created/last used/revoked; never a key
    nbl admin revoke-key KEY_ID                         the key answers 401 from then on
    nbl admin rotate-key --team NAME                    a new key; the old ones work until revoked

A fresh database is migrated on the way (as `nbl serve` does); an old one is refused with a hint.
A typo in --team is an error, not a new team: new teams need --create-team.
"""

from __future__ import annotations

import json
from datetime import datetime

from cli.admin import db_session, migrated_settings


def add_key_commands(asub) -> None:
    p = asub.add_parser("create-key", help="create an API key for a team (a new team needs --create-team)")
    p.add_argument("--team", required=True, help="team name: 1-63 of a-z, 0-9 and '-', not starting with '-'")
    p.add_argument("--create-team", action="store_true", help="create the team if it does not exist")
    p.add_argument("--name", help="a label for the key")
    p.set_defaults(func=cmd_create_key)
    p = asub.add_parser("list-keys", help="list API keys: id, prefix, team, times (never the key itself)")
    p.add_argument("--team", help="only this team's keys")
    p.add_argument(
        "--json",
        action="store_true",
        help='a JSON list of {"id", "prefix", "team", "created_at", "last_used_at", "revoked_at"}',
    )
    p.set_defaults(func=cmd_list_keys)
    p = asub.add_parser("revoke-key", help="revoke an API key: it answers 401 from then on")
    p.add_argument("key_id", type=int, metavar="KEY_ID", help="the key's id (`nbl admin list-keys`)")
    p.set_defaults(func=cmd_revoke_key)
    p = asub.add_parser("rotate-key", help="create a new key for an existing team; the old keys work until revoked")
    p.add_argument("--team", required=True, help="team name")
    p.add_argument("--name", help="a label for the new key")
    p.set_defaults(func=cmd_rotate_key)


def _existing_team(session, name: str, hint: str = ""):
    import difflib

    from sqlalchemy import select

    from service.core.models import Team
    from service.keys.auth import get_team

    team = get_team(session, name) if len(name) <= 64 and name.isprintable() else None
    if team is None:
        close = difflib.get_close_matches(name, session.scalars(select(Team.name)).all(), n=3)
        raise ValueError(f"no team {name[:70]!r}" + (f" (did you mean {', '.join(close)}?)" if close else "") + hint)
    return team


def cmd_create_key(args) -> int:
    from service.keys.auth import check_team_name, create_key, get_or_create_team, get_team

    check_team_name(args.team)
    with db_session(migrated_settings(announce=True)) as session:
        if get_team(session, args.team) is None and not args.create_team:
            _existing_team(session, args.team, hint="; give --create-team to create it")
        team, created = get_or_create_team(session, args.team)
        key, row = create_key(session, team, args.name)
        print(f"team: {team.name} ({'created' if created else 'existing'})")
        print(f"key {row.id} ({row.prefix}...) created; it is shown once, store it now:")
    print(key)
    return 0


def cmd_rotate_key(args) -> int:
    from service.keys.auth import create_key, list_keys

    with db_session(migrated_settings()) as session:
        team = _existing_team(session, args.team)
        key, row = create_key(session, team, args.name)
        older = [k for k, _ in list_keys(session, team) if k.id != row.id and k.revoked_at is None]
        print(f"team: {team.name}: key {row.id} ({row.prefix}...) created; it is shown once, store it now.")
        if older:
            print(
                "these keys keep working until revoked (`nbl admin revoke-key KEY_ID`): "
                + ", ".join(f"{k.id} ({k.prefix}...)" for k in older)
            )
    print(key)
    return 0


def cmd_revoke_key(args) -> int:
    from service.keys.auth import revoke_key

    with db_session(migrated_settings()) as session:
        row, now = revoke_key(session, args.key_id)
        if now:
            print(f"key {row.id} ({row.prefix}...) revoked: it answers 401 from now on")
        else:
            print(f"key {row.id} ({row.prefix}...) was already revoked at {_time(row.revoked_at)}")
    return 0


def cmd_list_keys(args) -> int:
    from service.keys.auth import list_keys

    with db_session(migrated_settings()) as session:
        team = _existing_team(session, args.team) if args.team is not None else None
        rows = [
            {
                "id": k.id,
                "prefix": k.prefix,
                "team": name,
                "name": k.name,
                "created_at": k.created_at,
                "last_used_at": k.last_used_at,
                "revoked_at": k.revoked_at,
            }
            for k, name in list_keys(session, team)
        ]
    if args.json:
        fields = ("id", "prefix", "team", "created_at", "last_used_at", "revoked_at")
        print(
            json.dumps(
                [{f: r[f].isoformat() if isinstance(r[f], datetime) else r[f] for f in fields} for r in rows], indent=2
            )
        )
        return 0
    header = ("id", "prefix", "team", "name", "created", "last used", "revoked")
    table = [header] + [
        (
            str(r["id"]),
            r["prefix"],
            r["team"],
            r["name"] or "-",
            _time(r["created_at"]),
            _time(r["last_used_at"]),
            _time(r["revoked_at"]),
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return 0


def _time(t: datetime | None) -> str:
    return "-" if t is None else t.strftime("%Y-%m-%d %H:%M:%SZ")
