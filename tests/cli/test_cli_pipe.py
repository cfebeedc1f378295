"""`nbl ... | head -1`: a reader that goes away is not a traceback (cli/main.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_closed_stdout_is_a_quiet_exit():
    read, write = os.pipe()
    os.close(read)  # the reader is gone before nbl writes: its write fails with EPIPE
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "cli.main", "admin", "gen-secret-key"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
    finally:
        os.close(write)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr


def test_an_open_stdout_gets_the_output():
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", "admin", "gen-secret-key"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout.strip() and proc.stderr == ""
