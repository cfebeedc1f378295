"""Fixtures of the worker's tests (tests/worker/ and below)."""

from __future__ import annotations

from pathlib import Path

import pytest
from testkit.models import save_tiny_checkpoint


@pytest.fixture
def tiny_dir(tmp_path) -> Path:
    """A tiny random Llama saved as a local checkpoint (safetensors + tokenizer)."""
    return save_tiny_checkpoint(tmp_path / "tiny-llama")
