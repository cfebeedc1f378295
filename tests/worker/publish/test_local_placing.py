"""How a local publish places an output's files (worker/publish/local.place): the weights hard-linked where
scratch and publish directory share a filesystem, everything else copied, every file with umask modes; the
published output stays whole when the scratch folder is deleted, and a second filesystem gets copies."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from publish_helpers import pop_manifest, tree

from worker.publish.local import LocalDir


def staged(root: Path) -> Path:
    out = root / "staged"
    out.mkdir(parents=True)
    (out / "model.safetensors").write_bytes(b"weights" * 1000)
    (out / "model-Q8_0.gguf").write_bytes(b"gguf" * 100)
    (out / "README.md").write_text("# card\n")
    (out / "config.json").write_text("{}\n")
    for f in out.iterdir():
        f.chmod(0o600)  # as the safetensors writer leaves its temporary file
    return out


def publish(base: Path, staged_dir: Path) -> Path:
    LocalDir(base / "published", "alpha", "smol", "job_a").publish(staged_dir, 4, several=False)
    return base / "published" / "alpha" / "smol"


def umask_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def test_weights_are_linked_the_rest_copied_all_with_umask_modes(tmp_path):
    src = staged(tmp_path)
    out = publish(tmp_path, src)
    for name in ("model.safetensors", "model-Q8_0.gguf"):
        assert (out / name).stat().st_ino == (src / name).stat().st_ino, name
    for name in ("README.md", "config.json"):
        assert (out / name).stat().st_ino != (src / name).stat().st_ino, name
    assert {f.name: f.stat().st_mode & 0o777 for f in out.iterdir()} == {f.name: umask_mode() for f in out.iterdir()}


def test_deleting_the_scratch_copy_leaves_the_published_output_whole(tmp_path):
    src = staged(tmp_path)
    expected = tree(src)
    out = publish(tmp_path, src)
    shutil.rmtree(src)  # what the job's end does to its scratch space (service/core/paths.scratch_dir)
    files = tree(out)
    files.pop(".nbl-owner.json")
    pop_manifest(files)  # sizes and sha256s still match the bytes
    assert files == expected


def test_a_symlinked_weights_file_is_copied_not_linked(tmp_path):
    src = staged(tmp_path)
    elsewhere = tmp_path / "base.safetensors"
    elsewhere.write_bytes(b"base weights")
    elsewhere.chmod(0o600)
    (src / "model.safetensors").unlink()
    (src / "model.safetensors").symlink_to(elsewhere)
    out = publish(tmp_path, src)
    assert (out / "model.safetensors").read_bytes() == b"base weights"
    assert (out / "model.safetensors").stat().st_ino != elsewhere.stat().st_ino
    assert elsewhere.stat().st_mode & 0o777 == 0o600  # the link's target is not touched


def test_across_filesystems_the_weights_are_copied(tmp_path):
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("no second filesystem (/dev/shm) here")
    with tempfile.TemporaryDirectory(dir=shm) as other:
        src = staged(Path(other))
        expected = tree(src)
        out = publish(tmp_path, src)
        assert (out / "model.safetensors").stat().st_dev != (src / "model.safetensors").stat().st_dev
    files = tree(out)
    files.pop(".nbl-owner.json")
    pop_manifest(files)
    assert files == expected
