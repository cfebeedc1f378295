"""Retention (issue 10, finding 5): the statistics cache's cap evicts the least recently used entries
first, and `nbl admin gc` reports, then frees, what ended jobs left: scratch and staging directories
of terminal or unknown jobs, cache entries over the cap, unfinished cache writes; never a queued or
running job's directories, never a published output."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from cli.main import main
from nbl import lru
from service.core.db import make_engine, make_sessionmaker
from service.core.models import Job, Team, new_job_id


def entry(directory: Path, name: str, size: int, used: float) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, (used, used))
    return path


def test_eviction_takes_the_least_recently_used_first(tmp_path):
    now = time.time()
    for i, name in enumerate("abcd"):  # written in order a, b, c, d: 100 bytes each
        entry(tmp_path, f"{name}.stats", 100, now - 1000 + i)
    entry(tmp_path, "e.1234.tmp", 500, now - 2000)  # a write in progress: not an entry
    lru.touch(tmp_path / "a.stats")  # a was read just now: the most recently used
    assert [e.path.name for e in lru.over_cap(tmp_path, 250)] == ["b.stats", "c.stats"]
    assert lru.over_cap(tmp_path, 400) == []
    gone = lru.evict(tmp_path, 250)
    assert [e.path.name for e in gone] == ["b.stats", "c.stats"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.stats", "d.stats", "e.1234.tmp"]
    assert [e.path.name for e in lru.evict(tmp_path, 0)] == ["d.stats", "a.stats"]  # 0: no cache
    assert lru.evict(tmp_path / "missing", 0) == []


def files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_gc_dry_run_reports_and_gc_frees(sqlite_clean_url, settings_for, monkeypatch, capsys):
    settings = settings_for(sqlite_clean_url, stats_cache_max_bytes=250)
    engine = make_engine(settings)
    with make_sessionmaker(engine)() as s:
        team = Team(name="alpha")
        s.add(team)
        s.flush()
        ids = {status: new_job_id() for status in ("succeeded", "failed", "cancelled", "queued", "running")}
        s.add_all(Job(id=i, team_id=team.id, spec={"model": {"id": "a/b"}}, status=st) for st, i in ids.items())
        s.commit()
    engine.dispose()
    unknown = new_job_id()
    for job_id in [*ids.values(), unknown]:
        entry(settings.home / "jobs" / job_id / "k1", "model.safetensors", 1000, time.time())
    for job_id in (ids["failed"], ids["running"]):
        entry(settings.publish_dir / ".nbl-staging" / job_id / "k1", "model.safetensors", 10, time.time())
    now = time.time()
    for i, name in enumerate("abc"):
        entry(settings.stats_dir, f"{name}.stats", 100, now - 100 + i)
    entry(settings.stats_dir, "old.99.tmp", 7, now - 2 * 86400)
    entry(settings.stats_dir, "new.98.tmp", 7, now)
    entry(settings.publish_dir / "alpha" / "smol", "model.safetensors", 5, now)  # published: never touched
    before = files(settings.home)

    monkeypatch.setenv("NBL_HOME", str(settings.home))
    monkeypatch.setenv("DATABASE_URL", settings.database_url)
    monkeypatch.setenv("NBL_STATS_CACHE_MAX_BYTES", "250")
    expected = {
        ("scratch", f"jobs/{ids['succeeded']}"),
        ("scratch", f"jobs/{ids['failed']}"),
        ("scratch", f"jobs/{ids['cancelled']}"),
        ("scratch", f"jobs/{unknown}"),
        ("staging", f"published/.nbl-staging/{ids['failed']}"),
        ("stats", "stats/a.stats"),
        ("stats", "stats/old.99.tmp"),
    }

    def gc(*flags) -> dict:
        assert main(["admin", "gc", "--json", *flags]) == 0
        report = json.loads(capsys.readouterr().out)
        assert {(i["kind"], Path(i["path"]).relative_to(settings.home).as_posix()) for i in report["items"]} == expected
        assert report["bytes"] == 4 * 1000 + 10 + 100 + 7
        return report

    assert gc("--dry-run")["dry_run"] is True
    assert files(settings.home) == before  # a dry run deletes nothing

    gc()
    left = files(settings.home)
    assert left == {f for f in before if not any(f.startswith(p + "/") or f == p for _, p in expected)}
    assert {
        f"jobs/{ids['queued']}/k1/model.safetensors",
        f"jobs/{ids['running']}/k1/model.safetensors",
        f"published/.nbl-staging/{ids['running']}/k1/model.safetensors",
        "published/alpha/smol/model.safetensors",
        "stats/b.stats",
        "stats/c.stats",
        "stats/new.98.tmp",
    } <= left
    assert main(["admin", "gc"]) == 0 and "freed 0 bytes in 0 item(s)" in capsys.readouterr().out  # nothing left
