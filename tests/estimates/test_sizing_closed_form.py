"""The sizing is arithmetic, not loops over what a config says: a set count for a huge layer count answers at
once (issue 24 §1)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from service.jobs.selection_sets import expected_sets

REPO = Path(__file__).resolve().parents[2]
ANSWER_S = 60  # generous: each call takes microseconds; before the fix they never returned


def reference_sets(criterion, ks, n_layers, width, k_auto):
    """The definition, step by step: the greedy's step s tries min(width, L - s) candidate layers."""
    import math

    top = n_layers // 2 if k_auto else max(ks, default=1)
    tried = max(1, math.ceil(math.log2(max(n_layers, 2)))) if k_auto else len(ks)
    greedy = sum(min(width, n_layers - s) for s in range(top)) if criterion in ("greedy", "auto") else 0
    return 1 + greedy + tried * (3 if criterion == "auto" else 0 if criterion == "greedy" else 1)


def test_expected_sets_is_the_step_by_step_count():
    for n_layers in range(1, 40):
        for width in (1, 2, 3, 8, 39, 64):
            for criterion in ("greedy", "auto", "cca"):
                assert expected_sets(criterion, (), n_layers, width, True) == \
                    reference_sets(criterion, (), n_layers, width, True), (n_layers, width, criterion)
                for k in range(1, n_layers):
                    assert expected_sets(criterion, (k,), n_layers, width) == \
                        reference_sets(criterion, (k,), n_layers, width, False), (n_layers, width, criterion, k)


def test_a_huge_layer_count_is_counted_at_once():
    """In a child process, so that a loop over 10**12 layers fails this test instead of hanging the suite."""
    code = ("from service.jobs.selection_sets import expected_sets as e; "
            "print(e('greedy', (), 10**12, 8, True), e('auto', (10**9,), 10**12, 8), e('greedy', (), 10**300, 8, True))")
    try:
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=ANSWER_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"expected_sets did not answer within {ANSWER_S} s")
    assert out.returncode == 0, out.stderr
    greedy, auto, _ = (int(n) for n in out.stdout.split())
    assert greedy == 1 + 8 * 10**12 // 2  # L/2 steps of 8 candidates each
    assert auto == 1 + 8 * 10**9 + 3

