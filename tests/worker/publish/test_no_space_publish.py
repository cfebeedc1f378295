"""A full disk at a local publish (issue 35 finding 10): the job's error is one line, classed `system`, naming
the output and no server path (it was copytree's shutil.Error, every file's source and destination in it), and
nothing of the job stays in the publish directory. The disk fills at the edge: os.sendfile, which shutil's copy
uses on Linux, fails with ENOSPC after the first file, as a full filesystem does."""

from __future__ import annotations

import errno
import os
import shutil

import pytest

from worker.errors import Failure, classify
from worker.publish.local import LocalDir


@pytest.fixture
def staged(tmp_path):
    out = tmp_path / "scratch" / "k1"
    out.mkdir(parents=True)
    for name in ("config.json", "README.md", "tokenizer.json", "model.safetensors"):
        (out / name).write_bytes(b"x" * 4096)
    return out


class Disk:
    """os.sendfile, which fails with `code` once it has copied a file after `fill()` (at its next call, past that
    file's end, as a disk that fills midway)."""

    def __init__(self, monkeypatch, code: int):
        self.code, self.copied, self.filling = code, 0, False
        self.sendfile = os.sendfile
        monkeypatch.setattr(os, "sendfile", self)

    def fill(self) -> "Disk":
        self.filling = True
        return self

    def __call__(self, out_fd, in_fd, offset, count):
        if self.filling and self.copied:
            raise OSError(self.code, os.strerror(self.code))
        sent = self.sendfile(out_fd, in_fd, offset, count)
        self.copied += self.filling and sent > 0
        return sent


@pytest.mark.parametrize("several, named", [(False, "local_dir 'out'"), (True, "local_dir 'out' (k=1)")])
def test_a_full_disk_is_one_classed_line_and_leaves_nothing(staged, monkeypatch, tmp_path, several, named):
    publish_dir = tmp_path / "published"
    disk = Disk(monkeypatch, errno.ENOSPC).fill()
    with pytest.raises(Exception) as failed:
        LocalDir(publish_dir, "alpha", "out", "job_0001").publish(staged, 1, several)
    assert disk.copied  # the disk filled midway, not before the first file
    assert classify(failed.value) == Failure("system", f"no space left on device while publishing {named}")
    assert not (publish_dir / "alpha" / "out").exists()
    assert not any((publish_dir / ".nbl-staging").iterdir())


def test_a_full_disk_at_the_second_output_removes_the_first(staged, monkeypatch, tmp_path):
    publish_dir = tmp_path / "published"
    dest, disk = LocalDir(publish_dir, "alpha", "out", "job_0001"), Disk(monkeypatch, errno.ENOSPC)
    dest.publish(staged, 1, True)
    assert (publish_dir / "alpha" / "out" / "k1" / "config.json").is_file()
    disk.fill()
    with pytest.raises(Exception) as failed:
        dest.publish(staged, 2, True)
    assert str(failed.value) == "no space left on device while publishing local_dir 'out' (k=2)"
    assert not (publish_dir / "alpha" / "out").exists()  # as over the quota: nothing of the job stays


def test_other_copy_failures_are_left_as_they_came(staged, monkeypatch, tmp_path):
    Disk(monkeypatch, errno.EIO).fill()
    with pytest.raises(shutil.Error) as failed:
        LocalDir(tmp_path / "published", "alpha", "out", "job_0001").publish(staged, 1, False)
    assert classify(failed.value).type == "system"
