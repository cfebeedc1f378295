"""Fixtures of the evaluation tests (eval_helpers.py holds their small models and data)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def one_thread():
    """Run a test's forwards on one CPU thread, then restore the count. On a loaded 2-core machine,
    many small forwards on 2 OpenMP threads can run 40x slower than on one (threads wait on each
    other); no test here asserts a timing, this only keeps the suite quick."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
