"""Teams and API keys. A key is `nbl_` + 43 url-safe characters (256 random bits). Only sha256(key)
is stored, which is enough for a key of that entropy (no salt or slow hash needed: nothing to
brute-force). A revoked key answers 401; a team name follows TEAM_NAME wherever a team is created."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import Connection, Row, Select, bindparam, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.core.errors import Unauthorized
from service.core.models import ApiKey, Team, utcnow

KEY_PREFIX = "nbl_"
# Lower-case letters, digits and '-', 1 to 63 characters: safe in a path, a URL, a log line and a
# Hub repo name, and no look-alikes ("Team" vs "team").
TEAM_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
# last_used_at is written at most this often per key, so the hot GET path rarely writes.
LAST_USED_RESOLUTION = timedelta(seconds=60)
MAX_ID = 2**31 - 1  # api_keys.id is an INTEGER: 4 bytes on Postgres


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class Principal:
    team_id: int
    team_name: str
    max_active_jobs: int | None


def check_team_name(name: str) -> str:
    if not TEAM_NAME.fullmatch(name):
        raise ValueError(
            f"invalid team name {name[:70]!r}: use 1 to 63 lower-case letters, digits and '-', "
            "starting with a letter or digit"
        )
    return name


def get_team(session: Session, name: str) -> Team | None:
    return session.scalar(select(Team).where(Team.name == name))


def get_or_create_team(session: Session, name: str) -> tuple[Team, bool]:
    """The team, created (with a valid name) if new: returns (team, created)."""
    team = get_team(session, name)
    if team is not None:
        return team, False
    team = Team(name=check_team_name(name))
    session.add(team)
    try:
        session.commit()
    except IntegrityError:  # created concurrently
        session.rollback()
        return session.scalars(select(Team).where(Team.name == name)).one(), False
    return team, True


def create_key(session: Session, team: Team, name: str | None = None) -> tuple[str, ApiKey]:
    """A new key for `team`: returns (the key, shown once; its row). Commits."""
    if name is not None and (len(name) > 64 or not name.isprintable()):
        raise ValueError("a key's name is a label of at most 64 printable characters on one line")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    row = ApiKey(team_id=team.id, prefix=key[:12], key_hash=hash_key(key), name=name)
    session.add(row)
    session.commit()
    return key, row


def key_query(*columns, join=None, on=None) -> Select:
    """The lookup of a key (bound as `key_hash`), with more `columns` from a table outer-joined `on` a
    condition: a read can fetch what it needs with the key, in one round trip (service/jobs/read_cache.py)."""
    query = (
        select(Team.id, Team.name, Team.max_active_jobs, ApiKey.id.label("key_id"), ApiKey.last_used_at, *columns)
        .select_from(ApiKey)
        .join(Team, ApiKey.team_id == Team.id)
    )
    if join is not None:
        query = query.outerjoin(join, on)
    return query.where(ApiKey.key_hash == bindparam("key_hash"), ApiKey.revoked_at.is_(None))


# Built once: a statement object memoises its cache key, so each request skips building and hashing it.
_KEY_QUERY = key_query()


def authenticate(session: Session | Connection, authorization: str | None) -> Principal:
    return authenticate_row(session, authorization, _KEY_QUERY)[0]


def authenticate_row(
    session: Session | Connection, authorization: str | None, query: Select, params: dict | None = None
) -> tuple[Principal, Row]:
    """The key's team, and the row of `query` (a key_query) that found it; Unauthorized for no live key."""
    principal, rows = authenticate_rows(session, authorization, query, params)
    return principal, rows[0]


def authenticate_rows(
    session: Session | Connection, authorization: str | None, query: Select, params: dict | None = None
) -> tuple[Principal, list[Row]]:
    """authenticate_row with every row of `query` (one per row of its outer-joined table, at least one)."""
    if not authorization:
        raise Unauthorized()
    scheme, _, key = authorization.partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key.startswith(KEY_PREFIX) or len(key) > 200:
        raise Unauthorized()
    # A Core connection, not session.execute: the ORM layer is half the cost of this Core query, which
    # every request runs (bench/api_profile.py). The caller commits (a Session's, or run_read's).
    conn = session.connection() if isinstance(session, Session) else session
    rows = conn.execute(query, {**(params or {}), "key_hash": hash_key(key)}).all()
    if not rows:
        raise Unauthorized()
    row = rows[0]
    now = utcnow()
    if row.last_used_at is None or now - row.last_used_at >= LAST_USED_RESOLUTION:
        # Conditional, so concurrent requests of the same minute write once; the caller commits.
        conn.execute(
            update(ApiKey)
            .where(
                ApiKey.id == row.key_id,
                or_(ApiKey.last_used_at.is_(None), ApiKey.last_used_at <= now - LAST_USED_RESOLUTION),
            )
            .values(last_used_at=now)
        )
    return Principal(team_id=row.id, team_name=row.name, max_active_jobs=row.max_active_jobs), rows


def list_keys(session: Session, team: Team | None = None) -> list[tuple[ApiKey, str]]:
    """Every key (revoked ones too) with its team's name, oldest first."""
    query = select(ApiKey, Team.name).join(Team, ApiKey.team_id == Team.id).order_by(ApiKey.id)
    if team is not None:
        query = query.where(ApiKey.team_id == team.id)
    return [(k, name) for k, name in session.execute(query).all()]


def revoke_key(session: Session, key_id: int) -> tuple[ApiKey, bool]:
    """Revoke a key: returns (its row, whether it was revoked now rather than before). Commits."""
    # An id past the column's range is no key's: asked of Postgres, it raised NumericValueOutOfRange (a traceback)
    row = session.get(ApiKey, key_id) if 0 < key_id <= MAX_ID else None
    if row is None:
        raise ValueError(f"no key with id {key_id} (`nbl admin list-keys` lists them)")
    if row.revoked_at is not None:
        return row, False
    row.revoked_at = utcnow()
    session.commit()
    return row, True


def set_team_hub_token(session: Session, team_name: str, ciphertext: str | None) -> None:
    """Store (or with None, remove) a team's encrypted Hub token. The team must exist."""
    team = session.scalar(select(Team).where(Team.name == team_name))
    if team is None:
        raise ValueError(f"no team {team_name!r} (`nbl admin create-key --team NAME --create-team` creates one)")
    team.hub_token_encrypted = ciphertext
    session.commit()
