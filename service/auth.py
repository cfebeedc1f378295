"""API keys: `nbl_` + 43 url-safe characters (256 random bits). Only sha256(key) is stored, which
is enough for a key of that entropy (no salt or slow hash needed: nothing to brute-force)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from .errors import Unauthorized
from .models import ApiKey, Team

KEY_PREFIX = "nbl_"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class Principal:
    team_id: int
    team_name: str
    max_active_jobs: int | None


def get_or_create_team(session: Session, name: str) -> tuple[Team, bool]:
    team = session.scalar(select(Team).where(Team.name == name))
    if team is not None:
        return team, False
    team = Team(name=name)
    session.add(team)
    try:
        session.commit()
    except IntegrityError:  # created concurrently
        session.rollback()
        return session.scalars(select(Team).where(Team.name == name)).one(), False
    return team, True


def create_key(session: Session, team: Team, name: str | None = None) -> tuple[str, ApiKey]:
    """A new key for `team`: returns (the key, shown once; its row). Commits."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    row = ApiKey(team_id=team.id, prefix=key[:12], key_hash=hash_key(key), name=name)
    session.add(row)
    session.commit()
    return key, row


def authenticate(session: Session, authorization: str | None) -> Principal:
    if not authorization:
        raise Unauthorized()
    scheme, _, key = authorization.partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key.startswith(KEY_PREFIX) or len(key) > 200:
        raise Unauthorized()
    row = session.execute(
        select(Team.id, Team.name, Team.max_active_jobs)
        .join(ApiKey, ApiKey.team_id == Team.id)
        .where(ApiKey.key_hash == hash_key(key), ApiKey.revoked_at.is_(None))
    ).first()
    if row is None:
        raise Unauthorized()
    return Principal(team_id=row.id, team_name=row.name, max_active_jobs=row.max_active_jobs)


def set_team_hub_token(session: Session, team_name: str, ciphertext: str | None) -> None:
    """Store (or with None, remove) a team's encrypted Hub token. The team must exist."""
    team = session.scalar(select(Team).where(Team.name == team_name))
    if team is None:
        raise ValueError(f"no team {team_name!r} (`nbl admin create-key --team NAME` creates one)")
    team.hub_token_encrypted = ciphertext
    session.commit()
