"""`nbl admin migrate-outputs` (issue 10, finding 3): outputs of the old flat layout NBL_PUBLISH_DIR/<name>
move under their team, recorded as local:<team>/<name>[/k<K>], marked with the job that wrote them last;
a dry run changes nothing, a second run nothing more, and folders no job recorded stay where they are."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from sqlalchemy import select

from cli.main import main
from service.core.db import make_engine, make_sessionmaker
from service.core.models import Artifact, Job, Team, new_job_id, utcnow


def files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_old_flat_outputs_move_under_their_team(sqlite_clean_url, settings_for, monkeypatch, capsys):
    settings = settings_for(sqlite_clean_url)
    pub = settings.publish_dir
    engine = make_engine(settings)
    sessions = make_sessionmaker(engine)
    t0 = utcnow()
    with sessions() as s:
        alpha, beta = Team(name="alpha"), Team(name="beta")
        s.add_all([alpha, beta])
        s.flush()
        jobs = {}

        def job(team, local_dir, k, outputs, at):
            job_id = new_job_id()
            s.add(
                Job(
                    id=job_id,
                    team_id=team.id,
                    status="succeeded",
                    spec={"publish": {"local_dir": local_dir}, "compression": {"k": k}},
                )
            )
            s.flush()
            for kk, path in outputs:
                s.add(
                    Artifact(
                        job_id=job_id, k=kk, kind="local_dir", uri=str(path), created_at=t0 + timedelta(seconds=at)
                    )
                )
            jobs[local_dir, team.name] = job_id
            return job_id

        job(alpha, "smol", 4, [(4, pub / "smol")], 1)
        job(beta, "smol", 2, [(2, pub / "smol")], 2)  # the old layout: beta's job replaced alpha's output
        job(beta, "multi", [1, 2], [(1, pub / "multi" / "k1"), (2, pub / "multi" / "k2")], 3)
        job(alpha, "alpha", 4, [(4, pub / "alpha")], 4)  # an output named like a team
        job(alpha, "gone", 4, [(4, pub / "gone")], 5)  # deleted by hand since
        s.commit()
    for rel in (
        "smol/config.json",
        "multi/k1/config.json",
        "multi/k2/config.json",
        "alpha/config.json",
        "stray/config.json",
    ):
        (pub / rel).parent.mkdir(parents=True, exist_ok=True)
        (pub / rel).write_text(rel)
    before = files(pub)

    monkeypatch.setenv("NBL_HOME", str(settings.home))
    monkeypatch.setenv("DATABASE_URL", settings.database_url)

    def run(*flags) -> dict:
        assert main(["admin", "migrate-outputs", "--json", *flags]) == 0
        return json.loads(capsys.readouterr().out)

    def uris() -> set[str]:
        with sessions() as s:
            return set(s.scalars(select(Artifact.uri)))

    dry = run("--dry-run")
    assert {(m["name"], m["team"], m["status"]) for m in dry["moves"]} == {
        ("smol", "beta", "moved"),
        ("multi", "beta", "moved"),
        ("alpha", "alpha", "moved"),
        ("gone", "alpha", "missing"),
    }
    assert dry["left"] == ["stray"]
    assert files(pub) == before and all(u.startswith("/") for u in uris())  # a dry run changes nothing

    report = run()
    assert [m["status"] for m in report["moves"]] == [m["status"] for m in dry["moves"]]
    after = files(pub)
    owner = {p.rsplit("/", 1)[0]: json.loads(d) for p, d in after.items() if p.endswith(".nbl-owner.json")}
    assert owner == {
        "beta/smol": {"team": "beta", "job_id": jobs["smol", "beta"]},
        "beta/multi": {"team": "beta", "job_id": jobs["multi", "beta"]},
        "alpha/alpha": {"team": "alpha", "job_id": jobs["alpha", "alpha"]},
    }
    assert {p: d for p, d in after.items() if not p.endswith(".nbl-owner.json")} == {
        "beta/smol/config.json": b"smol/config.json",
        "beta/multi/k1/config.json": b"multi/k1/config.json",
        "beta/multi/k2/config.json": b"multi/k2/config.json",
        "alpha/alpha/config.json": b"alpha/config.json",
        "stray/config.json": b"stray/config.json",
    }
    assert uris() == {
        "local:alpha/smol",
        "local:beta/smol",
        "local:beta/multi/k1",
        "local:beta/multi/k2",
        "local:alpha/alpha",
        "local:alpha/gone",
    }
    assert run() == {"dry_run": False, "moves": [], "left": ["stray"]}  # again: nothing more to do
    engine.dispose()

    # the moved output is beta's job's: another job of beta may not replace it (without overwrite)
    import pytest

    from worker.publish.local import LocalConflict, LocalDir

    with pytest.raises(LocalConflict, match="already holds the output of job"):
        LocalDir(pub, "beta", "smol", "job_new").publish(pub / "stray", 1, several=False)
