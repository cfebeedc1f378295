"""The estimate's arithmetic (service/estimates/model.py) against the engine it describes, and the
figures issue 12 asks of it."""

from __future__ import annotations

import pytest

from configs import LLAMA_8B, LLAMA_70B, TINY
from service.estimates.classes import DEFAULT, parse_classes, place
from service.estimates.model import CUDA_CONTEXT_HOST, Options, default_batch_size, estimate, holdout_count, sums_bytes
from service.estimates.shapes import ShapeError, shape_of

GiB = 2**30


def test_sums_and_defaults_are_the_engines():
    import torch

    from worker.engine import calibrate, calibration_stage
    from worker.engine.stats import LayerAccumulator

    for d in (8, 64, 576):
        for modes in (("attn",), ("block",), ("attn", "block")):
            assert sums_bytes(d, len(modes)) == LayerAccumulator(d, "cpu", torch.float32, modes).nbytes()
    for seq_len in (2, 32, 512, 2048, 8192, 32768):
        for on_gpu, device in ((True, "cuda"), (False, "cpu")):
            assert default_batch_size(seq_len, on_gpu) == calibration_stage.default_batch_size(seq_len, device)
    for n in (1, 2, 9, 10, 256):
        assert holdout_count(n, 0.1) == calibrate.holdout_count(n, 0.1)


def test_shape_counts_parameters_like_transformers():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = dict(TINY, tie_word_embeddings=True)
    model = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures",)}))
    shape = shape_of(cfg)
    assert shape.params == sum(p.numel() for p in model.parameters())
    assert shape.layer_params == sum(p.numel() for p in model.model.layers[0].parameters())


def test_70b_calibration_fits_one_80gb_gpu():
    shape = shape_of(LLAMA_70B)
    opts = Options(num_samples=256, seq_len=2048, ks=(8,), outputs=False, whole_model=False)
    est = estimate(shape, opts, ["cuda:0"])
    assert est.device_bytes <= 80 * GiB
    assert est.device_bytes > 2 * shape.layer_params + sums_bytes(8192, 1)  # a layer (bf16) and its sums at least
    assert est.host_bytes >= 256 * 2048 * 8192 * 2  # every block's hidden states, bf16
    assert est.disk["download"] == shape.params * 2 and est.disk["outputs"] == 0
    assert est.disk["stats_cache"] == 80 * sums_bytes(8192, 1)
    lo, hi = est.seconds
    assert 0 < lo < hi


def test_cpu_puts_everything_on_the_host():
    shape = shape_of(LLAMA_8B)
    opts = Options(num_samples=32, seq_len=512, ks=(4,), outputs=False, whole_model=False, dtype="bfloat16")
    gpu, cpu = estimate(shape, opts, ["cuda:0"]), estimate(shape, opts, ["cpu"])
    assert cpu.device_bytes == 0 and gpu.device_bytes > 0
    # the layer, its sums and the batch moved to the host (the GPU run's host also holds the CUDA runtime's own)
    assert cpu.host_bytes > gpu.host_bytes - CUDA_CONTEXT_HOST


def test_spill_moves_hidden_states_to_disk():
    shape = shape_of(LLAMA_8B)
    opts = Options(num_samples=256, seq_len=2048, outputs=False, whole_model=False)
    free = estimate(shape, opts, ["cuda:0"])
    capped = estimate(shape, Options(**{**opts.__dict__, "host_cache_bytes": 10**9}), ["cuda:0"])
    hidden = 256 * 2048 * 4096 * 2
    assert free.disk["spill"] == 0 and capped.disk["spill"] == hidden - 10**9
    assert free.host_bytes - capped.host_bytes == hidden - 10**9


def test_two_devices_share_the_blocks_and_the_time():
    shape = shape_of(LLAMA_8B)
    opts = Options(num_samples=256, seq_len=2048, outputs=False, whole_model=False)
    one, two = estimate(shape, opts, ["cuda:0"]), estimate(shape, opts, ["cuda:0", "cuda:1"])
    assert two.seconds[0] < one.seconds[0]
    assert two.device_bytes <= one.device_bytes


def test_placement_smallest_class_that_holds_it():
    classes = parse_classes(DEFAULT)
    assert place(shape_of(TINY), Options(num_samples=8, seq_len=32), classes, 21600).cls.name == "cpu"
    p8 = place(shape_of(LLAMA_8B), Options(), classes, 21600)  # too slow for the CPU, two 16 GB models: 80g
    assert p8.cls.name == "gpu-80g"
    p70 = place(shape_of(LLAMA_70B), Options(), classes, 21600)  # a job loads the whole model: none holds it
    assert p70.cls is None and "over the 85.9 GB of each device of gpu-8x80g" in p70.reason


@pytest.mark.parametrize("bad", ["cpu", "cpu=0x0", "CPU=0x0/64", "a=1x2/3,a=1x2/3", ""])
def test_bad_classes_refused(bad):
    with pytest.raises(ValueError):
        parse_classes(bad)


def test_config_without_numbers_is_an_error():
    with pytest.raises(ShapeError, match="hidden_size"):
        shape_of({"num_hidden_layers": 2})
