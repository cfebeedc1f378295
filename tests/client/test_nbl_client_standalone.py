"""nbl_client stands alone: its pyproject needs only httpx and pydantic, and it imports and talks
HTTP in a fresh interpreter where the service, the worker, torch and FastAPI cannot be imported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tomllib

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "python"

SCRIPT = """
import sys

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"service", "worker", "torch", "fastapi", "sqlalchemy", "celery", "numpy"}:
            raise ImportError(f"nbl_client imported {name}")

sys.meta_path.insert(0, Refuse())
from nbl_client import Client, Unavailable
with Client("http://127.0.0.1:9", "nbl_x", connect_timeout=0.2, warn=lambda _: None) as c:
    try:
        c.job("job_x")
    except Unavailable as e:
        assert "cannot reach the API at http://127.0.0.1:9" in str(e), e
    else:
        raise AssertionError("a closed port answered")
print("ok")
"""


def test_the_client_package_needs_only_httpx_and_pydantic():
    project = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "nbl-client"
    assert sorted(d.split(">")[0] for d in project["dependencies"]) == ["httpx", "pydantic"]


def test_the_client_runs_without_the_service(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=tmp_path,
        env={"PYTHONPATH": str(CLIENT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr
