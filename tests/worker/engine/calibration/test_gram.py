"""stats.gram: xᵀx from the blocks on and above the diagonal must equal the whole product."""

import pytest
import torch

from worker.engine.calibration.products import gram, gram_blocks


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


def test_products_auto_is_tf32_on_a_gpu_and_float32_on_the_cpu():
    from worker.engine.calibration.products import resolve_products

    assert resolve_products("auto", "cpu") == "float32" and resolve_products("auto", torch.device("cuda:1")) == "tf32"
    assert resolve_products("float64", "cuda:0") == "float64"
    with pytest.raises(ValueError, match="product precision must be one of"):
        resolve_products("bf16", "cpu")


def test_tf32_products_switch_torchs_flag_for_the_products_only_and_change_nothing_on_the_cpu():
    from transformers import LlamaConfig, LlamaForCausalLM

    from worker.engine.calibration.calibrate import calibrate
    from worker.engine.calibration.products import tf32_matmuls

    before = torch.backends.cuda.matmul.allow_tf32
    with tf32_matmuls(True):
        assert torch.backends.cuda.matmul.allow_tf32 is True
    assert torch.backends.cuda.matmul.allow_tf32 == before
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=128,
        )
    ).eval()
    blocks = torch.randint(128, (4, 16))
    plain, tf32 = (calibrate(model, blocks, 2, 1, progress=False, modes=("attn",), tf32=t) for t in (False, True))
    for a, b in zip(plain.stats, tf32.stats):
        assert torch.equal(a.splits["fit"].xx, b.splits["fit"].xx) and torch.equal(a.yy["attn"], b.yy["attn"])


@pytest.mark.parametrize("d", [64, 300, 576])
def test_upper_blocks_added_then_mirrored_equal_whole_products_added(d):
    """The accumulator adds only gram()'s upper blocks into its float64 total and mirrors once: the same
    bits as adding the whole (mirrored) float32 product every batch."""
    from worker.engine.calibration.products import add_upper, mirror_upper

    g = torch.Generator().manual_seed(d)
    whole = torch.zeros(d, d, dtype=torch.float64)
    upper = torch.zeros(d, d, dtype=torch.float64)
    prod = torch.empty(d, d)
    for _ in range(3):
        x = torch.randn(100, d, generator=g) + 2.0
        whole += gram(x, prod)
        add_upper(upper, gram(x, prod, mirror=False))
    mirror_upper(upper)
    assert torch.equal(upper, whole) and torch.equal(upper, upper.T)
