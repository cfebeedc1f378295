"""The local directory destination: NBL_PUBLISH_DIR/<team>/<name>, or <name>/k{K} when a job asked
for several k (with a root README.md over them), holding exactly the staged folder (weights,
modeling_nbl.py, tokenizer, card, plot), the owner marker `.nbl-owner.json` ({team, job_id}) and the
manifest `.nbl-files.json` (each file's size and sha256, nbl/outputs/manifest.py; the API serves by it).

Who may write there: the path holds the team, so another team never reaches it. Within a team,
<name> belongs to the job whose marker it holds: that job may publish again (a retried attempt;
publishing twice is harmless), another job of the team only with `"overwrite": true`, and a
directory without a marker (not made by a job: an old flat-layout output moved by hand, an
operator's folder) is never replaced nor deleted. A refusal is a `user` error (LocalConflict).

The team's disk quota (NBL_TEAM_DISK_QUOTA_BYTES, nbl/outputs/quota.py) is checked under the same
lock before anything is copied: the whole job's outputs first (check_space), then each output as it goes
(another job of the team may have published meanwhile). Over it is QuotaExceeded, a `user` error, and
nothing of this job stays: a folder of several outputs that it had begun is removed with the refusal.

How: under one lock (flock on NBL_PUBLISH_DIR/.nbl-publish.lock), the output is placed into this job's
own staging directory NBL_PUBLISH_DIR/.nbl-staging/<job id> (the marker written inside it), the
previous output moved aside into the same staging directory, the copy renamed into place, and what
was moved aside deleted. A reader never sees half an output; nothing outside <name> is touched.

Placing: the weights (*.safetensors, *.gguf) are hard-linked where the scratch folder and the publish
directory share a filesystem, the rest copied. A weights file is written once, into a fresh `.partial`
folder or file renamed into place (worker/engine/forms/saving.py, gguf_export.py), and never rewritten in place,
so the scratch copy's later deletion (unlink) leaves the published one whole; the small files (the card,
rewritten at each publish) are copies. Linking made the local publish of SmolLM2 (540 MB) a fixed cost,
not a copy whose time varied with the disk's writeback (bench/results/estimate_accuracy_stages.md).

A full disk stops the copy at its first failed file and fails the job as `system` in one line naming the output,
no server path (no_space.py); as over the quota, nothing of the job stays (a folder of several outputs it had
begun is removed).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from pathlib import Path

from nbl.lru import tree_size
from nbl.outputs import manifest
from nbl.outputs.manifest import OWNER_FILE
from nbl.outputs.quota import Check, QuotaExceeded, usage
from service.core.paths import STAGING_DIR, local_uri

from ..errors import NoSpace
from .destination import Published
from .no_space import full, worded

LOCK_FILE = ".nbl-publish.lock"
LINKED = (".safetensors", ".gguf")  # written once, never in place: safe to share an inode with the scratch copy


def place(src: str, dst: str) -> str:
    """copytree's copy_function: a weights file hard-linked (a copy across filesystems, or where links are
    refused), any other file copied; either way with the mode a plain open() gives (0666 less the umask), not
    a 0600 source's."""
    mask = os.umask(0)  # the only portable way to read the umask; restored at once
    os.umask(mask)
    try:
        if src.endswith(LINKED) and not os.path.islink(src):
            try:
                os.link(src, dst)
            except OSError as e:  # EXDEV (another filesystem), EPERM (links refused): copy
                if full(e):
                    raise
                shutil.copyfile(src, dst)
        else:
            shutil.copyfile(src, dst)
    except OSError as e:
        if full(e):  # at the first file: copytree would go on and gather every path into one shutil.Error
            raise NoSpace(os.strerror(e.errno).lower()) from e
        raise
    os.chmod(dst, 0o666 & ~mask)
    return dst


class LocalConflict(ValueError):
    """<name> holds what this job may not replace: a `user` error (a ValueError) naming the conflict."""


class LocalDir:
    def __init__(
        self, publish_dir: Path, team: str, name: str, job_id: str, overwrite: bool = False, quota: int | None = None
    ):
        """`team` and `name` are validated simple names (service.core.paths.publish_dir checks them);
        `quota`: the team's disk quota in bytes (None: no limit)."""
        self.base, self.team, self.name, self.job_id = Path(publish_dir), team, name, job_id
        self.overwrite, self.quota = overwrite, quota
        self.root = self.base / team / name
        self.staging = self.base / STAGING_DIR / job_id

    def location(self, k: int, several: bool) -> tuple[str, str | None]:
        """For the card's loading snippet: the output's name, never a server path."""
        return self.name, (f"k{k}" if several else None)

    def check_space(self, adding: int) -> None:
        """Before publishing: the job's outputs (`adding` bytes in all) fit in the team's quota, counting the
        output <name> holds now as freed (this job replaces it, or is refused by the owner check)."""
        with self._locked():
            self._check_owner()
            self._check_quota(adding, tree_size(self.root))

    def publish(self, staged: Path, k: int, several: bool) -> Published:
        with self._locked():
            self._check_owner()
            dest = self.root / f"k{k}" if several else self.root
            ours = several and self.owner().get("job_id") == self.job_id  # else _claim_root replaces <name> whole
            try:
                self._check_quota(tree_size(staged), tree_size(dest if ours else self.root))
            except QuotaExceeded:
                if ours:  # outputs already published by this job go too: nothing partial stays
                    self._swap_out(self.root)
                raise
            if several:
                self._claim_root()
            tmp = self.staging / f"k{k}"
            try:
                with worded(f"local_dir {self.name!r}" + (f" (k={k})" if several else "")):  # one line
                    shutil.copytree(staged, tmp, copy_function=place)
                    manifest.write_for(tmp)  # sizes and sha256s as published, renamed into place with the files
                    if not several:
                        self._write_owner(tmp)
            except NoSpace:
                if several:  # <name> is this job's now: as over the quota, nothing partial stays
                    self._swap_out(self.root)
                raise
            self._swap(tmp, dest)
        return Published(kind="local_dir", uri=local_uri(self.team, self.name, k if several else None))

    def publish_root(self, staged: Path) -> Published:
        """The root README.md over the k{K} folders, replaced atomically."""
        with self._locked():
            self._check_owner()
            self._claim_root()
            tmp = self.staging / "README.md"
            with worded(f"local_dir {self.name!r} (its root card)"):
                shutil.copyfile(Path(staged) / "README.md", tmp)
            tmp.replace(self.root / "README.md")
        return Published(kind="local_dir", uri=local_uri(self.team, self.name))

    # --- ownership ------------------------------------------------------------------------------

    def owner(self) -> dict | None:
        """The marker of <name>: {} when absent, None when <name> exists without a readable marker."""
        if not os.path.lexists(self.root):
            return {}
        if self.root.is_symlink() or not self.root.is_dir():
            return None
        try:
            data = json.loads((self.root / OWNER_FILE).read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and data.get("job_id") else None

    def _check_owner(self) -> None:
        owner = self.owner()
        where = f"local_dir {self.name!r}"
        if owner is None:
            raise LocalConflict(
                f"{where} already exists and was not created by a job; it is never replaced: choose another name"
            )
        if not owner or owner["job_id"] == self.job_id:
            return  # new, or ours (a retried attempt replaces its own output)
        if owner.get("team") != self.team:
            raise LocalConflict(f"{where} belongs to another team; it is never replaced: choose another name")
        if not self.overwrite:
            raise LocalConflict(
                f"{where} already holds the output of job {owner['job_id']}; choose another name, "
                'or give "overwrite": true in publish to replace it'
            )

    def _claim_root(self) -> None:
        """Several k: <name> is a folder of k{K} outputs marked with this job; another job's (overwrite,
        checked) is replaced whole, so none of its k{K} folders stays under our marker."""
        if self.owner().get("job_id") == self.job_id:
            return
        fresh = self.staging / "root"
        fresh.mkdir()
        self._write_owner(fresh)
        self._swap(fresh, self.root)

    def _write_owner(self, folder: Path) -> None:
        (folder / OWNER_FILE).write_text(json.dumps({"team": self.team, "job_id": self.job_id}) + "\n")

    def _check_quota(self, adding: int, replacing: int) -> None:
        if self.quota is None:
            return
        check = Check(self.team, self.quota, usage(self.base, self.team), adding, replacing=replacing)
        if check.over:
            raise QuotaExceeded(check.message(f"publishing {self.name!r}:"))

    # --- moves ----------------------------------------------------------------------------------

    def _swap_out(self, dest: Path) -> None:
        """Remove `dest` (this job's): moved aside into the staging directory first, then deleted."""
        old = self.staging / f"old-{dest.name}"
        dest.rename(old)
        shutil.rmtree(old, ignore_errors=True)

    def _swap(self, new: Path, dest: Path) -> None:
        """Rename `new` to `dest`; what `dest` held (already allowed to go) is moved aside, then deleted."""
        old = self.staging / f"old-{dest.name}"
        if os.path.lexists(dest):
            dest.rename(old)
        dest.parent.mkdir(parents=True, exist_ok=True)
        new.rename(dest)
        shutil.rmtree(old, ignore_errors=True)

    @contextlib.contextmanager
    def _locked(self):
        """One publisher at a time: the owner check and the renames are one step. The staging directory
        is this job's alone; what a crashed attempt left there is removed first."""
        self.base.mkdir(parents=True, exist_ok=True)
        with open(self.base / LOCK_FILE, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                shutil.rmtree(self.staging, ignore_errors=True)
                self.staging.mkdir(parents=True)
                yield
            finally:
                shutil.rmtree(self.staging, ignore_errors=True)
                fcntl.flock(lock, fcntl.LOCK_UN)
