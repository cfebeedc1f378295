"""Local outputs of the old flat layout (`nbl admin migrate-outputs`, cli/outputs.py),
NBL_PUBLISH_DIR/<name>, move to NBL_PUBLISH_DIR/<team>/<name>, and their recorded URIs (server paths)
become `local:<team>/<name>[/k<K>]`.

The database says whose each output is: every `local_dir` artifact whose URI is still a path names
its job, hence its team and its name (publish.local_dir, else the job id) and whether it was one of
several k. A name several jobs wrote (the old layout let any job replace any output) goes to the job
that wrote it last, the one whose files are there; that job's marker (.nbl-owner.json) is written
into the moved folder, so it and, with overwrite, its team's jobs may replace it later. Folders that
no artifact names are left where they are and listed: an operator decides.

Two steps, each a rename on one filesystem: every folder to move goes first to
NBL_PUBLISH_DIR/.nbl-migrate/<name> (so an old output named like a team is out of the way), then to
its team's folder. Run it with the workers stopped; it is safe to run again (after a crash too).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from nbl.outputs.manifest import OWNER_FILE
from service.core.paths import LOCAL_PREFIX, local_uri, publish_dir
from service.core.settings import Settings

HOLD_DIR = ".nbl-migrate"


@dataclass
class Move:
    name: str
    team: str
    job_id: str  # the last job that wrote it: the owner
    status: str  # moved | missing (no folder: recorded only) | conflict (the target exists) | already | bad-name
    uris: int = 0  # artifact URIs rewritten


def _name(job_id: str, spec: dict) -> str:
    return (spec.get("publish") or {}).get("local_dir") or job_id


def _several(spec: dict) -> bool:
    k = (spec.get("compression") or {}).get("k")
    return isinstance(k, list) and len(k) > 1


def migrate(settings: Settings, session, dry_run: bool = False) -> dict:
    """{"dry_run", "moves": [{name, team, job_id, status, uris}], "left": [names no artifact names]}."""
    from sqlalchemy import select

    from service.core.models import Artifact, Job, Team

    rows = session.execute(
        select(Artifact, Job.spec, Team.name)
        .join(Job, Job.id == Artifact.job_id)
        .join(Team, Team.id == Job.team_id)
        .where(Artifact.kind == "local_dir", ~Artifact.uri.startswith(LOCAL_PREFIX))
        .order_by(Artifact.created_at, Artifact.id)
    ).all()
    base, hold = settings.publish_dir, settings.publish_dir / HOLD_DIR
    moves: dict[str, Move] = {}
    for art, spec, team in rows:  # oldest first: the last writer of a name wins
        name = _name(art.job_id, spec)
        moves[name] = Move(name, team, art.job_id, "", moves[name].uris if name in moves else 0)
        moves[name].uris += 1
        if not dry_run:
            art.uri = local_uri(team, name, art.k if _several(spec) else None)
    for m in moves.values():
        source = base / m.name if (base / m.name).is_dir() else hold / m.name
        try:
            target = publish_dir(settings, m.team, m.name)
        except ValueError:  # a team named before team names had a grammar: an operator decides
            m.status = "bad-name"
            continue
        if (target / OWNER_FILE).is_file() and not source.is_dir():
            m.status = "already"
        elif not source.is_dir():
            m.status = "missing"
        elif os.path.lexists(target):
            m.status = "conflict"
        else:
            m.status = "moved"
    if not dry_run:
        hold.mkdir(parents=True, exist_ok=True)
        for m in moves.values():
            if m.status == "moved" and (base / m.name).is_dir():
                (base / m.name).rename(hold / m.name)
        for m in moves.values():
            if m.status == "moved":
                target = publish_dir(settings, m.team, m.name)
                target.parent.mkdir(parents=True, exist_ok=True)
                (hold / m.name).rename(target)
                (target / OWNER_FILE).write_text(json.dumps({"team": m.team, "job_id": m.job_id}) + "\n")
        session.commit()
        if not any(hold.iterdir()):
            hold.rmdir()
    teams = {m.team for m in moves.values()} | set(session.scalars(select(Team.name)))
    left = (
        sorted(
            e.name
            for e in os.scandir(base)
            if e.is_dir(follow_symlinks=False)
            and not e.name.startswith(".")
            and e.name not in teams
            and e.name not in moves
        )
        if base.is_dir()
        else []
    )
    return {"dry_run": dry_run, "moves": [asdict(m) for m in moves.values()], "left": left}
