"""GET /v1/models: the `local:` models on this server (every team may use them) with their shapes and sizes
on disk, then the Hub ids the team's recent jobs named, newest first, with the shape their estimate read
from config.json at submit (null when the API could not read it: offline, or a job older than this field).
Every entry, local ones included, carries how many of the caller's recent jobs named it and when the newest
was created (a local model unused by this team: 0 and null).

One ordered list, paged by a cursor that names the last item given (the list is rebuilt per request: the
models directory and the team's last RECENT_JOBS jobs, both small)."""

from __future__ import annotations

import os

from sqlalchemy import select
from sqlalchemy.orm import Session

from nbl.lru import tree_size
from nbl.model.checks import read_config
from nbl.model.shape import shape_summary
from nbl.names import LOCAL_PREFIX
from service.core.models import Job
from service.core.settings import Settings
from service.http.pagination import NOT_A_CURSOR, bad_cursor, cursor_value, encode_cursor

RECENT_JOBS = 500  # the Hub ids of the team's last this many jobs
CURSOR = "m1"  # a page of models ends after this model id (service/http/pagination.py)


def local_models(settings: Settings, used: dict[str, dict] | None = None) -> list[dict]:
    """The models under NBL_MODELS_DIR; `used` (team_use) gives each its job count and last use."""
    used = used or {}
    root = settings.models_dir
    try:
        names = sorted(n for n in os.listdir(root) if not n.startswith("."))
    except (FileNotFoundError, NotADirectoryError, TypeError):
        return []
    out = []
    for name in names:
        directory = root / name
        config = read_config(directory) if directory.is_dir() else None
        if config is None:
            continue  # not a model (a half-imported one has no config yet)
        out.append(
            {
                "id": LOCAL_PREFIX + name,
                "source": "local",
                "shape": shape_summary(config),
                "size_bytes": tree_size(directory),
                "last_used_at": (used.get(LOCAL_PREFIX + name) or {}).get("last_used_at"),
                "jobs": (used.get(LOCAL_PREFIX + name) or {}).get("jobs", 0),
            }
        )
    return out


def team_use(rows) -> dict[str, dict]:
    """Pure: (spec, estimate, created_at) rows, newest first -> model id -> {"jobs", "last_used_at", "shape"},
    in order of last use. Local and Hub ids alike: a `local:` model is the server's, its use the team's."""
    seen: dict[str, dict] = {}
    for spec, estimate, created_at in rows:  # newest first: the first seen is the latest use
        model = str(((spec or {}).get("model") or {}).get("id") or "")
        if not model:
            continue
        entry = seen.setdefault(model, {"jobs": 0, "last_used_at": created_at, "shape": None})
        entry["jobs"] += 1
        if entry["shape"] is None and isinstance(estimate, dict) and isinstance(estimate.get("shape"), dict):
            entry["shape"] = estimate["shape"]
    return seen


def recent_use(session: Session, team_id: int) -> dict[str, dict]:
    rows = session.execute(
        select(Job.spec, Job.estimate, Job.created_at)
        .where(Job.team_id == team_id)
        .order_by(Job.id.desc())
        .limit(RECENT_JOBS)
    ).all()
    return team_use(rows)


def hub_models(used: dict[str, dict]) -> list[dict]:
    return [
        {"id": model, "source": "hub", "size_bytes": None, **entry}
        for model, entry in used.items()
        if not model.startswith(LOCAL_PREFIX)
    ]


def _after(items: list[dict], cursor: str) -> int:
    model = cursor_value(cursor, CURSOR)
    for i, item in enumerate(items):
        if model is not None and item["id"] == model:
            return i + 1
    raise bad_cursor(f"{NOT_A_CURSOR} (or its model is no longer listed)")


def page(session: Session, settings: Settings, team_id: int, limit: int, after: str | None) -> dict:
    used = recent_use(session, team_id)
    items = local_models(settings, used) + hub_models(used)
    start = _after(items, after) if after else 0
    chunk = items[start : start + limit]
    more = start + limit < len(items)
    return {
        "object": "list",
        "data": chunk,
        "has_more": more,
        "next_cursor": encode_cursor(CURSOR, chunk[-1]["id"]) if more and chunk else None,
    }
