"""Fixtures every folder of tests shares: each test's own NBL_HOME, a calibration file of real text, the
SmolLM2 tests' shared home; the service tests' databases and brokers (the plugin testkit.service_fixtures) and
a real job output to serve (testkit.job_output). Which files run the system end to end (E2E_FILES).

A fixture one folder alone uses lives in that folder's conftest.py; plain helpers (tiny models, the real
SmolLM2, request bodies) are modules of tests/testkit, imported by name: no test imports this file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from testkit.models import DATA_DIR

pytest_plugins = ["testkit.service_fixtures", "testkit.job_output"]


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    """Every test gets its own NBL_HOME (stats cache, converted models) unless it shares one on purpose."""
    monkeypatch.setenv("NBL_HOME", str(tmp_path_factory.mktemp("nbl_home")))


@pytest.fixture
def text_file(tmp_path) -> Path:
    """A local .jsonl calibration file of real text (C4 documents)."""
    docs = json.loads((DATA_DIR / "c4" / "c4_demo.json").read_text())[:40]
    path = tmp_path / "calib.jsonl"
    path.write_text("".join(json.dumps({"text": d["text"]}) + "\n" for d in docs))
    return path


@pytest.fixture(scope="session")
def quant_python() -> Path:
    """The quantization venv's python (tests/quant, the quantize job in tests/llama_cpp); the test is skipped
    without it, except in CI (CI set), where it must be there."""
    exe = Path(__file__).resolve().parents[1] / ".venv-quant" / "bin" / "python"
    if not exe.is_file() and not os.environ.get("CI"):
        pytest.skip(f"the quantization venv is missing ({exe}): `make quant-env`")
    return exe


@pytest.fixture(scope="session")
def smollm2_home(tmp_path_factory) -> Path:
    """An NBL_HOME shared by the SmolLM2 tests, so the GGUF is converted once per session."""
    return tmp_path_factory.mktemp("smollm2_home")


# Files whose tests run the system end to end: a real worker, server or fresh Python processes per test (paths
# under tests/). They run in `make test` (and CI) like the rest; `make test-fast` leaves them out with `not e2e`.
E2E_FILES = {
    "integration/test_job_e2e.py",
    "integration/test_path_leaks.py",
    "worker/publish/test_publish_job.py",
    "worker/publish/test_gates_job.py",
    "worker/publish/test_selection_job.py",
    "worker/publish/test_loadcheck.py",
    "worker/publish/test_loadcheck_device_map.py",
    "worker/publish/test_hub_failures_job.py",
    "worker/engine/calibration/test_data_parallel.py",
    "worker/engine/test_devices_options.py",
    "worker/test_job_progress.py",
    "service/estimates/test_routing_redis.py",
    "worker/eval/test_eval_device_map.py",
    "docs/test_docs_quickstart.py",
    "llama_cpp/test_gguf_job_e2e.py",
    "llama_cpp/test_quantize_job_e2e.py",
}


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    missing = sorted(f for f in E2E_FILES if not (here / f).is_file())
    if missing:  # a moved or renamed file would silently join `make test-fast`
        raise pytest.UsageError(f"tests/conftest.py E2E_FILES names files that are not there: {missing}")
    for item in items:
        rel = Path(str(item.fspath)).relative_to(here).as_posix() if str(item.fspath).startswith(str(here)) else ""
        if rel in E2E_FILES or rel.startswith("faults/"):
            item.add_marker(pytest.mark.e2e)
