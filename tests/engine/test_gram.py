"""stats.gram: xᵀx from the blocks on and above the diagonal must equal the whole product."""

import pytest
import torch

from worker.engine.stats import gram, gram_blocks


@pytest.mark.parametrize("d", [64, 130, 300, 576])
def test_gram_equals_the_whole_product_and_is_exactly_symmetric(d):
    torch.manual_seed(d)
    x = torch.randn(257, d, dtype=torch.float64) + 3.0  # float64: the two orders of summation agree to rounding
    out = torch.full((d, d), float("nan"), dtype=torch.float64)  # every entry must be written
    got = gram(x, out)
    assert got is out
    torch.testing.assert_close(got, x.T @ x, rtol=1e-12, atol=1e-9)
    assert torch.equal(got, got.T)


def test_gram_splits_wide_products_and_leaves_narrow_ones_whole():
    assert gram_blocks(64) == 1
    assert gram_blocks(300) == 2
    assert gram_blocks(4096) == 4
