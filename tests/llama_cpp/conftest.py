"""Fixtures of the GGUF tests (gguf_helpers.py holds their plain helpers)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gguf_helpers import GGUF_PYTHON


@pytest.fixture(scope="session")
def gguf_python() -> Path:
    """The GGUF venv's python; the test is skipped without it, except in CI (CI set), where it must be there."""
    if not GGUF_PYTHON.is_file() and not os.environ.get("CI"):
        pytest.skip(f"the GGUF venv is missing ({GGUF_PYTHON}): `make gguf-env`")
    return GGUF_PYTHON
