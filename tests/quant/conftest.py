"""Fixtures of the quantization tests: the quantization venv's python (skipped without it, except in CI)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

QUANT_PYTHON = Path(__file__).resolve().parents[2] / ".venv-quant" / "bin" / "python"


@pytest.fixture(scope="session")
def quant_python() -> Path:
    """The quantization venv's python; the test is skipped without it, except in CI (CI set), where it must be."""
    if not QUANT_PYTHON.is_file() and not os.environ.get("CI"):
        pytest.skip(f"the quantization venv is missing ({QUANT_PYTHON}): `make quant-env`")
    return QUANT_PYTHON
