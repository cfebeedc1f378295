"""A stand-in for the GGUF venv's python, for the tests of how the worker runs llama.cpp's converter (issue 35):
an executable script that export_gguf runs as `PYTHON export_gguf.py MODEL_DIR OUT TYPE`. It appends
`PID MODEL_DIR OUT` to its log, then writes OUT at once, or sleeps first (a converter still running), or exits
with an error."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

SCRIPT = """#!/bin/sh
echo "$$ $2 $3" >> {log}
sleep {sleep}
printf 'GGUF fake' > "$3"
"""


def fake_converter(folder: Path, sleep: float = 0) -> tuple[Path, Path]:
    """(the executable, its log) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    exe, log = folder / "python", folder / "converter.log"
    exe.write_text(SCRIPT.format(log=log, sleep=sleep))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe, log


def runs(log: Path) -> list[tuple[int, str, str]]:
    """Each start of the fake converter: (pid, model dir, output path)."""
    lines = log.read_text().splitlines() if log.exists() else []
    return [(int(pid), model, out) for pid, model, out in (line.split(" ", 2) for line in lines)]


def _stat(pid: int | str) -> list[str] | None:
    """/proc/PID/stat's fields after the command's name: state, ppid, pgrp, session, ..."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def alive(pid: int) -> bool:
    """Running, not a zombie (a killed orphan may wait unreaped under a container's PID 1)."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def session(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[3]) if fields else None


def running(needle: bytes) -> list[int]:
    """The live processes whose command line holds `needle`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and needle in (entry / "cmdline").read_bytes() and alive(int(entry.name)):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def in_session(sid: int) -> list[int]:
    """The live processes of session `sid` (a converter's and whatever it started)."""
    live = []
    for entry in Path("/proc").iterdir():
        fields = _stat(entry.name) if entry.name.isdigit() else None
        if fields and fields[0] != "Z" and int(fields[3]) == sid:
            live.append(int(entry.name))
    return live


def llama_dir(path: Path) -> Path:
    """A folder that passes export_gguf's checks (only config.json is read before the converter runs)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    return path


def kill_quietly(*pids: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


def wait_for(check, timeout: float, what: str, every: float = 0.05):
    """Poll `check` until it returns something truthy (returned); AssertionError after `timeout` seconds."""
    end = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)
    return value
