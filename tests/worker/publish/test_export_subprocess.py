"""llama.cpp's converter as the worker runs it (worker/subproc.py, issue 35 finding 4): it dies with the process
that started it, even one killed by SIGKILL (which runs no cleanup), a stop (a cancel) or a timeout kills its
whole process group within seconds, and two attempts never write the same partial file. A fake converter that
sleeps (tests/testkit/fake_converter.py: a shell script whose `sleep` is a grandchild) stands in for llama.cpp's;
tests/llama_cpp/test_gguf_export_safety.py kills the real one."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from testkit.fake_converter import alive, fake_converter, in_session, kill_quietly, llama_dir, runs, session, wait_for

from worker.pipeline_io import Cancelled
from worker.publish.gguf_export import GgufExportError, export_formats, export_gguf

REPO = Path(__file__).resolve().parents[3]
PARENT = """
import sys
from pathlib import Path
from worker.publish.gguf_export import export_gguf
export_gguf(Path(sys.argv[1]), Path(sys.argv[2]), "f16", python=Path(sys.argv[3]))
"""


def test_a_sigkilled_parent_leaves_no_converter(tmp_path):
    exe, log = fake_converter(tmp_path / "venv", sleep=120)
    model = llama_dir(tmp_path / "k1")
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, model, model / "model-f16.gguf", exe], cwd=REPO, start_new_session=True
    )
    pid = None
    try:
        [(pid, _, _)] = wait_for(lambda: runs(log), 60, "the converter to start")
        sid = session(pid)
        assert alive(pid) and sid is not None
        os.kill(parent.pid, signal.SIGKILL)  # the parent alone, as the OOM killer or a hard time limit does
        parent.wait(timeout=10)
        wait_for(lambda: not in_session(sid), 10, "the converter and its children to die with their parent")
        assert not in_session(parent.pid)  # nor anything in the parent's own session
    finally:
        kill_quietly(*([pid] if pid else []))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)


def test_a_stop_kills_the_export_within_seconds(tmp_path):
    exe, log = fake_converter(tmp_path / "venv", sleep=120)
    model = llama_dir(tmp_path / "k1")
    asked = []

    def should_stop():  # a job's sink: Cancelled once the cancel is requested (here, at the second poll)
        asked.append(time.monotonic())
        if len(asked) == 2:
            raise Cancelled("cancelled by request")
        return False

    start = time.monotonic()
    with pytest.raises(Cancelled):
        export_gguf(model, model / "model-f16.gguf", "f16", python=exe, should_stop=should_stop)
    assert time.monotonic() - start < 10
    [(pid, _, _)] = runs(log)
    assert not in_session(pid)  # the converter was its guard's child: the guard's session is gone whole
    assert sorted(p.name for p in model.iterdir()) == ["config.json"]  # no GGUF, no partial


def test_a_timeout_kills_the_group_and_is_one_line(tmp_path):
    exe, log = fake_converter(tmp_path / "venv", sleep=120)
    model = llama_dir(tmp_path / "k1")
    with pytest.raises(GgufExportError, match=r"as f16 did not finish within 1 s$"):
        export_gguf(model, model / "model-f16.gguf", "f16", python=exe, timeout_s=1)
    [(pid, _, _)] = runs(log)
    sid = session(pid)
    assert sid is None or not in_session(sid)  # the shell's `sleep` too, not only the direct child
    assert sorted(p.name for p in model.iterdir()) == ["config.json"]


def test_two_attempts_never_share_a_partial_file(tmp_path):
    exe, log = fake_converter(tmp_path / "venv", sleep=1)
    model = llama_dir(tmp_path / "k1")
    out = model / "model-q8_0.gguf"
    errors = []

    def attempt():
        try:
            export_gguf(model, out, "q8_0", python=exe)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=attempt) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    written = [Path(w) for _, _, w in runs(log)]
    assert len(written) == 2 and written[0] != written[1]
    for w in written:  # each in a directory of its own beside `out`, none of them `out.partial`
        assert w.name == out.name and w.parent.parent == model and w.parent.name.endswith(".partial")
    assert out.read_bytes() == b"GGUF fake"
    assert sorted(p.name for p in model.iterdir()) == ["config.json", out.name]


def test_a_job_export_clears_what_a_killed_attempt_left(tmp_path):
    exe, log = fake_converter(tmp_path / "venv")
    model = llama_dir(tmp_path / "k1")
    (model / ".model-f16.gguf.abc123.partial").mkdir()  # a killed attempt's private directory
    (model / ".model-f16.gguf.abc123.partial" / "model-f16.gguf").write_bytes(b"half")
    (model / "model-f16.gguf.partial").write_bytes(b"half")  # the shared file of the code before
    export_formats(model, ["safetensors", "gguf:f16"], python=exe)
    assert sorted(p.name for p in model.iterdir()) == ["config.json", "model-f16.gguf"]  # nothing else published
