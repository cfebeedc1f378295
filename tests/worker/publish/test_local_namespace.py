"""Local outputs by team (issue 10, finding 3): NBL_PUBLISH_DIR/<team>/<name>, replaced only by the job
that made it (a retry) or, with overwrite, by another job of the same team; a directory no job made
is never deleted; each job stages in a directory of its own. The staged folders are plain files: the
destination copies folders and does not look inside."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from publish_helpers import pop_manifest, tree

from worker.publish.local import LocalConflict, LocalDir


def staged(tmp_path: Path, label: str) -> Path:
    out = tmp_path / "staged" / label
    (out / "sub").mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({"label": label}))
    (out / "model.safetensors").write_bytes(label.encode() * 100)
    (out / "sub" / "README.md").write_text(f"# {label}\n")
    return out


def local(tmp_path: Path, team: str, name: str, job: str, **kw) -> LocalDir:
    return LocalDir(tmp_path / "published", team, name, job, **kw)


def test_two_teams_with_one_local_dir_publish_side_by_side(tmp_path):
    a = local(tmp_path, "alpha", "smol", "job_a").publish(staged(tmp_path, "a"), 4, several=False)
    b = local(tmp_path, "beta", "smol", "job_b").publish(staged(tmp_path, "b"), 4, several=False)
    assert (a.uri, b.uri) == ("local:alpha/smol", "local:beta/smol")
    for team, label in (("alpha", "a"), ("beta", "b")):
        out = tree(tmp_path / "published" / team / "smol")
        assert json.loads(out.pop(".nbl-owner.json"))["team"] == team
        pop_manifest(out)
        assert out == tree(tmp_path / "staged" / label)


def test_the_same_name_twice_in_a_team_fails_unless_overwrite(tmp_path):
    first = local(tmp_path, "alpha", "smol", "job_a")
    first.publish(staged(tmp_path, "a"), 4, several=False)
    out = tmp_path / "published" / "alpha" / "smol"
    before = tree(out)

    with pytest.raises(LocalConflict, match=r"local_dir 'smol' already holds the output of job job_a.*overwrite") as e:
        local(tmp_path, "alpha", "smol", "job_b").publish(staged(tmp_path, "b"), 4, several=False)
    assert isinstance(e.value, ValueError)  # classed `user` by the task
    assert tree(out) == before  # byte-equal, marker included

    first.publish(staged(tmp_path, "a2"), 4, several=False)  # a retried attempt replaces its own output
    assert json.loads(tree(out)["config.json"]) == {"label": "a2"}

    local(tmp_path, "alpha", "smol", "job_b", overwrite=True).publish(staged(tmp_path, "b"), 4, several=False)
    after = tree(out)
    assert json.loads(after.pop(".nbl-owner.json")) == {"team": "alpha", "job_id": "job_b"}
    pop_manifest(after)
    assert after == tree(tmp_path / "staged" / "b")
    assert sorted(p.name for p in (tmp_path / "published" / "alpha").iterdir()) == ["smol"]


def test_a_directory_no_job_made_is_never_deleted(tmp_path):
    team = tmp_path / "published" / "alpha"
    mine = team / "smol"  # e.g. an old flat-layout output moved here by hand, without a marker
    (mine / "k4").mkdir(parents=True)
    (mine / "k4" / "model.safetensors").write_bytes(b"precious")
    for overwrite in (False, True):
        for several in (False, True):
            with pytest.raises(LocalConflict, match="was not created by a job; it is never replaced"):
                local(tmp_path, "alpha", "smol", "job_b", overwrite=overwrite).publish(
                    staged(tmp_path, "b"), 4, several=several
                )
    assert tree(mine) == {"k4/model.safetensors": b"precious"}


def test_a_job_touches_no_sibling_and_no_other_jobs_staging(tmp_path):
    """The old destination deleted `<name>.partial` (another job's output, a valid name) before copying."""
    partial = local(tmp_path, "alpha", "smol.partial", "job_a")
    partial.publish(staged(tmp_path, "a"), 4, several=False)
    crashed = tmp_path / "published" / ".nbl-staging" / "job_c" / "k4"  # job_c died mid-publish
    crashed.mkdir(parents=True)
    (crashed / "config.json").write_text("{}")
    before = tree(tmp_path / "published")

    local(tmp_path, "alpha", "smol", "job_b").publish(staged(tmp_path, "b"), 4, several=False)
    after = tree(tmp_path / "published")
    assert {p: d for p, d in after.items() if not p.startswith("alpha/smol/")} == before
    assert not (tmp_path / "published" / ".nbl-staging" / "job_b").exists()  # its own staging is gone


def test_overwriting_several_outputs_replaces_the_whole_folder(tmp_path):
    old = local(tmp_path, "alpha", "multi", "job_a")
    for k in (1, 2, 3):
        old.publish(staged(tmp_path, f"a{k}"), k, several=True)
    with pytest.raises(LocalConflict):
        local(tmp_path, "alpha", "multi", "job_b").publish(staged(tmp_path, "b"), 2, several=True)
    new = local(tmp_path, "alpha", "multi", "job_b", overwrite=True)
    assert new.publish(staged(tmp_path, "b"), 2, several=True).uri == "local:alpha/multi/k2"
    root = tmp_path / "published" / "alpha" / "multi"
    assert sorted(p.name for p in root.iterdir()) == [".nbl-owner.json", "k2"]  # none of job_a's k folders left
    assert json.loads((root / ".nbl-owner.json").read_text())["job_id"] == "job_b"
    new.publish(staged(tmp_path, "b4"), 4, several=True)  # its next output joins its own folder
    assert sorted(p.name for p in root.iterdir()) == [".nbl-owner.json", "k2", "k4"]
