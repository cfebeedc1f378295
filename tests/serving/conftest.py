"""The vLLM tests: they run in the serving venv (.venv-vllm, `make test-serving`); the outputs and
the transformers reference are made in the project's venv (.venv), in another process.

`make test` (the project's venv) ignores this folder; collected there anyway (a bare `pytest`), its
tests are skipped with the reason, except in CI (CI set), where they must run and so fail.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

from plan import KV_CACHE_GIB  # noqa: E402

IN_SERVING_VENV = importlib.util.find_spec("vllm") is not None
PROJECT_PYTHON = Path(os.environ.get("NBL_PROJECT_PYTHON", REPO / ".venv" / "bin" / "python"))
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(KV_CACHE_GIB))
os.environ.setdefault("NBL_DATA_DIR", str(REPO.parent / "shared" / "data"))


def pytest_collection_modifyitems(config, items):
    if IN_SERVING_VENV or os.environ.get("CI"):
        return
    skip = pytest.mark.skip(reason="vLLM tests run in the serving venv: `make serving-env test-serving`")
    for item in items:
        if HERE in Path(item.fspath).parents:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def reference(tmp_path_factory) -> dict:
    """The outputs (plan.OUTPUTS) and their transformers reference, made once per session in .venv.

    NBL_SERVING_WORK=DIR keeps them in DIR and reuses them while DIR/reference.json exists (remove it
    after changing the engine or prepare.py)."""
    work = Path(os.environ.get("NBL_SERVING_WORK") or tmp_path_factory.mktemp("serving"))
    if not (work / "reference.json").exists():
        env = {**os.environ, "NBL_HOME": str(work / "home")}
        subprocess.run([str(PROJECT_PYTHON), str(HERE / "prepare.py"), str(work)], env=env, check=True, timeout=1800)
    return json.loads((work / "reference.json").read_text())


@pytest.fixture(scope="session")
def served(reference) -> dict:
    """Every output run through vLLM in this process, one engine after another."""
    from vllm_run import run_all

    return run_all(reference)
