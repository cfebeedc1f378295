"""`nbl export` and a job's export against what a user or an input can plant (issue 35 findings 4 and 6): a
`y.gguf.partial` symlink beside --out is never written through, a folder named `./--vocab-only` is a path to it
and never the converter's option, and the real converter dies with a parent killed by SIGKILL. The first two
with a fake converter (tests/testkit/fake_converter.py) that shows what it was given; then llama.cpp's own, where the
GGUF venv exists."""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from gguf_helpers import REPO
from testkit.fake_converter import fake_converter, in_session, llama_dir, runs, session, wait_for

from cli.main import main
from worker.publish.gguf_export import SCRIPT as EXPORT_SCRIPT


def export(*args) -> int:
    return main(["export", *map(str, args)])


def test_a_planted_partial_symlink_is_not_followed(tmp_path, monkeypatch):
    exe, log = fake_converter(tmp_path / "venv")
    monkeypatch.setenv("NBL_GGUF_PYTHON", str(exe))
    model = llama_dir(tmp_path / "model")
    victim = tmp_path / "victim.txt"
    victim.write_text("not yours\n")
    (tmp_path / "y.gguf.partial").symlink_to(victim)  # what `nbl export --out y.gguf` wrote through
    assert export(model, "--format", "gguf", "--type", "f16", "--out", tmp_path / "y.gguf") == 0
    assert victim.read_text() == "not yours\n"
    assert (tmp_path / "y.gguf").read_bytes() == b"GGUF fake" and not (tmp_path / "y.gguf").is_symlink()
    [(_, _, written)] = runs(log)
    assert Path(written).parent.parent == tmp_path and not Path(written).parent.exists()  # its own, removed


def test_a_folder_named_like_an_option_is_a_path(tmp_path, monkeypatch):
    exe, log = fake_converter(tmp_path / "venv")
    monkeypatch.setenv("NBL_GGUF_PYTHON", str(exe))
    monkeypatch.chdir(tmp_path)
    llama_dir(tmp_path / "--vocab-only")
    assert export("./--vocab-only", "--format", "gguf", "--type", "f16", "--out", "./--x.gguf") == 0
    [(_, model, written)] = runs(log)
    assert model == str(tmp_path / "--vocab-only") and Path(written).is_absolute()  # never a leading `-`
    assert (tmp_path / "--x.gguf").read_bytes() == b"GGUF fake"


@pytest.fixture(scope="module")
def exportable(tmp_path_factory) -> Path:
    """A tiny random Llama with SmolLM2's tokenizer (llama.cpp's converter reads only tokenizers it knows)."""
    from test_gguf_job_e2e import tiny_with_smollm2_tokenizer

    tmp = tmp_path_factory.mktemp("exportable")
    tiny_with_smollm2_tokenizer(tmp / "tiny", tmp)
    return tmp / "tiny"


def gguf_counts(path: Path) -> tuple[int, int]:
    """(tensors, metadata keys) from a GGUF header: magic, version u32, tensor count u64, key count u64."""
    head = path.read_bytes()[:24]
    assert head[:4] == b"GGUF"
    return struct.unpack("<QQ", head[8:24])


@pytest.mark.slow
def test_the_real_converter_reads_an_option_named_folder_as_a_folder(exportable, gguf_python, tmp_path, monkeypatch):
    import shutil

    monkeypatch.setenv("NBL_GGUF_PYTHON", str(gguf_python))
    monkeypatch.chdir(tmp_path)
    shutil.copytree(exportable, tmp_path / "--vocab-only")
    assert export("./--vocab-only", "--format", "gguf", "--type", "f16", "--out", "out.gguf") == 0
    tensors, _ = gguf_counts(tmp_path / "out.gguf")
    assert tensors == 4 * 9 + 3  # every layer's 9 tensors, the embeddings, the final norm, the head: not vocab only


PARENT = """
import sys
from pathlib import Path
from worker.publish.gguf_export import export_gguf
export_gguf(Path(sys.argv[1]), Path(sys.argv[2]), "q8_0", python=Path(sys.argv[3]))
"""


def converter_of(out: Path) -> int | None:
    """The pid of the GGUF venv's python running export_gguf.py for `out` (not the guard that started it)."""
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if (
                entry.name.isdigit()
                and argv[1:2] == [str(EXPORT_SCRIPT).encode()]
                and any(out.name.encode() in a for a in argv[2:])
            ):
                return int(entry.name)
    return None


@pytest.mark.slow
def test_the_real_converter_dies_with_a_sigkilled_parent(exportable, gguf_python, tmp_path):
    out = tmp_path / "model-q8_0.gguf"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, exportable, out, gguf_python], cwd=REPO, start_new_session=True
    )
    pid = None
    try:
        pid = wait_for(lambda: converter_of(out), 60, "llama.cpp's converter to start", every=0.02)
        sid = session(pid)
        os.kill(pid, signal.SIGSTOP)  # held mid-export, so that it cannot finish by itself in the time allowed
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        wait_for(lambda: not in_session(sid), 10, "the converter to die with its parent")
        assert not out.exists()
    finally:
        with contextlib.suppress(ProcessLookupError, TypeError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)
