"""The sizing is arithmetic, not loops over what a config says: a set count or an estimate for a huge layer
count answers at once (issue 24 §1); and every time range runs from its low end to its high end (§17: a
model spread over a GPU, the host and disk priced its offload transfers at the slow rate in the fast end)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from testkit.model_configs import LLAMA_8B, LLAMA_70B, TINY

from nbl.selection.sets import expected_sets
from nbl.sizing.classes import DEFAULT, parse_classes, place
from nbl.sizing.model import estimate
from nbl.sizing.options import Options
from nbl.sizing.shapes import shape_of
from nbl.sizing.spread import Memory

REPO = Path(__file__).resolve().parents[3]
GiB = 2**30
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
                assert expected_sets(criterion, (), n_layers, width, True) == reference_sets(
                    criterion, (), n_layers, width, True
                ), (n_layers, width, criterion)
                for k in range(1, n_layers):
                    assert expected_sets(criterion, (k,), n_layers, width) == reference_sets(
                        criterion, (k,), n_layers, width, False
                    ), (n_layers, width, criterion, k)


def test_a_huge_layer_count_is_counted_at_once():
    """In a child process, so that a loop over 10**12 layers fails this test instead of hanging the suite."""
    code = (
        "from nbl.selection.sets import expected_sets as e; "
        "print(e('greedy', (), 10**12, 8, True), e('auto', (10**9,), 10**12, 8), e('greedy', (), 10**300, 8, True))"
    )
    try:
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=ANSWER_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"expected_sets did not answer within {ANSWER_S} s")
    assert out.returncode == 0, out.stderr
    greedy, auto, _ = (int(n) for n in out.stdout.split())
    assert greedy == 1 + 8 * 10**12 // 2  # L/2 steps of 8 candidates each
    assert auto == 1 + 8 * 10**9 + 3


SHAPES = {
    "tiny": TINY,
    "8b": LLAMA_8B,
    "70b": LLAMA_70B,
    "edge": {
        **LLAMA_70B,
        "num_hidden_layers": 4096,
        "hidden_size": 65536,
        "num_attention_heads": 512,
        "vocab_size": 2**22,
        "max_position_embeddings": 2**24,
    },
}
OPTIONS = {
    "calibrate": Options(num_samples=256, seq_len=2048, ks=(8,), outputs=False, whole_model=False),
    "job": Options(num_samples=256, seq_len=2048, ks=(4, 8), perplexity=("wikitext2",), tasks=("arc_easy",)),
    "greedy k auto": Options(
        num_samples=64, seq_len=512, ks=(1,), criterion="greedy", k_auto=True, perplexity=("wikitext2",)
    ),
    "loss": Options(num_samples=32, seq_len=1024, ks=(2,), criterion="loss", stats_precision="float64"),
}
MACHINES = [
    (["cpu"], Memory()),
    (["cuda:0"], Memory()),
    (["cuda:0"], Memory(24 * GiB, 128 * GiB)),
    (["cuda:0"], Memory(24 * GiB, 16 * GiB)),
    (["cuda:0", "cuda:1"], Memory(80 * GiB, 64 * GiB)),
]


@pytest.mark.parametrize("shape", SHAPES)
def test_every_time_range_runs_low_to_high(shape):
    for name, opts in OPTIONS.items():
        for devices, memory in MACHINES:
            lo, hi = estimate(shape_of(SHAPES[shape]), opts, devices, memory).seconds
            assert 0 < lo <= hi, (name, devices, memory, lo, hi)
        placed = place(shape_of(SHAPES[shape]), opts, parse_classes(DEFAULT), None)  # as the API sizes a job
        lo, hi = placed.estimate.seconds
        assert 0 < lo <= hi, (name, placed.cls, lo, hi)


def test_a_70b_job_spread_over_a_24_gib_gpu_its_host_and_disk():
    """Issue 24 §17's case: offloaded weights travel on every forward pass, faster at the low end."""
    opts = Options(num_samples=256, seq_len=2048, ks=(8,), perplexity=("wikitext2",))
    spread_out = estimate(shape_of(LLAMA_70B), opts, ["cuda:0"], Memory(24 * GiB, 128 * GiB))
    whole = estimate(shape_of(LLAMA_70B), opts, ["cuda:0"], Memory(200 * GiB, 512 * GiB))
    assert spread_out.disk["offload"] > 0 and whole.disk["offload"] == 0
    lo, hi = spread_out.seconds
    assert lo < hi and lo > whole.seconds[0] and hi > whole.seconds[1]
