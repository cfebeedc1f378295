"""The README's quick start, run as written: its ```bash blocks, taken from README.md by this test, in
one bash process, in order, from the checkout, as a new user pastes them into one shell.

Real processes all the way (`nbl import-gguf`, `nbl admin create-key`, `nbl serve` and `nbl worker` in
the background, `nbl submit`, `nbl wait`, `nbl download`, the model loaded with transformers) on the
embedded default (SQLite database and broker, no server): none of DATABASE_URL, BROKER_URL or any
NBL_* variable of this test session reaches it. What it gets is what the README asks a user to have:
HOME (here a temporary one: ~/.nbl and ~/nbl-quickstart land there), NBL_DATA_DIR (the Set up
section's offline data sets), PATH. Two more, neither changing what runs:
- HF_HUB_OFFLINE and HF_DATASETS_OFFLINE, so a step that would reach the Hub fails here instead of
  passing on a machine with a network: the quick start promises to run offline;
- PYTHONPATH when the session has one, so that a shared venv whose editable install points at
  another checkout still runs this one's code (CI's venv is this checkout's own).
The API's port is the one change to the text: 8000 becomes a free port, so runs beside each other
(or beside a real `nbl serve`) do not collide.

The job is the README's own (a few thousand calibration tokens, k=4, a short evaluation): a few
minutes on 2 cores. `set -euo pipefail`: any command that fails, fails the test with its output and
the service's logs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from doclib import shell_blocks
from testkit.models import DATA_DIR, REPO

pytestmark = pytest.mark.slow  # the real SmolLM2; e2e by file (tests/conftest.py E2E_FILES)

TIMEOUT_S = 1500  # generous: the README says about 5 minutes on 2 idle cores; CI's cores are shared
STEPS = ("nbl import-gguf", "nbl admin create-key", "nbl serve", "nbl worker", "nbl submit", "nbl wait", "nbl download")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_group(pgid: int, grace_s: float = 30) -> None:
    """End what the script left running (the README's `nbl serve &` and `nbl worker &`): they share
    the script's process group. SIGTERM (a warm shutdown), then SIGKILL for what is still there."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        end = time.monotonic() + grace_s
        while time.monotonic() < end:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)


def tail(path: Path, chars: int = 4000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.is_file() else "(none)"


def quick_start_script() -> str:
    script = "".join(b.text for b in shell_blocks(REPO / "README.md", "Quick start"))
    missing = [step for step in STEPS if step not in script]
    assert not missing, f"the README's quick start no longer runs {missing}"
    assert re.search(r"\b8000\b", script), "the quick start names no port 8000 for this test to replace"
    return script


def test_readme_quick_start_runs_as_written(tmp_path):
    script = re.sub(r"\b8000\b", str(free_port()), quick_start_script())
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "NBL_DATA_DIR": str(DATA_DIR),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    log = tmp_path / "quickstart.log"
    start = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            stop_group(proc.pid)
            proc.wait(timeout=10)
    work = home / "nbl-quickstart"
    said = (
        f"exit {rc} after {time.monotonic() - start:.0f} s\n--- the quick start's output\n{tail(log)}\n"
        f"--- serve.log\n{tail(work / 'serve.log')}\n--- worker.log\n{tail(work / 'worker.log')}"
    )
    assert rc == 0, said
    # The download is an NBL output: its config names the replaced layers.
    outputs = [json.loads(c.read_text()).get("nbl") for c in work.glob("*/config.json")]
    assert any(o and o.get("layers") for o in outputs), said
    print(said)  # the time it took, in the test's log (`pytest -s` or -rP)
