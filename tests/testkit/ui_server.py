"""A real `nbl serve` (uvicorn) for the dashboard's browser tests, and team keys from `nbl admin create-key`, as a
user gets them (the installed console script when there is one)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_SCRIPT = Path(sys.executable).with_name("nbl")  # the installed console script, as a user runs it
NBL = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "cli.main"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli_key(env: dict, team: str) -> str:
    out = subprocess.run(
        [*NBL, "admin", "create-key", "--team", team, "--create-team"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return re.search(r"^(nbl_[A-Za-z0-9_-]{43})$", out.stdout, re.M).group(1)


@contextmanager
def nbl_serve(env: dict):
    """A real `nbl serve` on a free port; yields a function that waits until it answers, then its URL.
    Started before the jobs are written and the browser starts, so the three start-ups overlap."""
    port = free_port()
    proc = subprocess.Popen(
        [*NBL, "serve", "--port", str(port), "--log-level", "warning"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> str:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=1):
                    return url
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    pytest.fail(f"nbl serve did not start: {proc.communicate()[0]}", pytrace=False)
                time.sleep(0.1)

    try:
        yield ready
    finally:
        proc.terminate()
        proc.wait(timeout=15)
