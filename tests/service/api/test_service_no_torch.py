"""The API process never imports torch: checked in a fresh interpreter that builds the app, runs
its lifespan, serves a request, and imports every service module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

SCRIPT = """
import pkgutil, sys
import service
from service.api import create_app
from service.core.settings import Settings
from fastapi.testclient import TestClient

for m in pkgutil.walk_packages(service.__path__, "service."):
    __import__(m.name)
with TestClient(create_app(Settings())) as c:
    assert c.get("/healthz").status_code == 200
    assert c.get("/v1/jobs").status_code == 401
heavy = sorted(m for m in ("torch", "transformers", "datasets", "accelerate", "safetensors", "numpy")
               if m in sys.modules)
assert "torch" not in sys.modules and "transformers" not in sys.modules, heavy
print("heavy modules:", heavy)
"""


def test_the_service_never_imports_torch(tmp_path):
    env = {**os.environ, "NBL_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO)}
    env.pop("DATABASE_URL", None)
    env.pop("BROKER_URL", None)
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "heavy modules: []" in out.stdout  # not even numpy
