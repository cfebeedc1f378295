"""The estimate's arithmetic (nbl/sizing/model.py) against the engine it describes, and the
figures issue 12 asks of it."""

from __future__ import annotations

import pytest
from testkit.model_configs import LLAMA_8B, LLAMA_70B, TINY

from nbl.sizing.classes import DEFAULT, parse_classes, place
from nbl.sizing.model import CUDA_CONTEXT_DEVICE, CUDA_CONTEXT_HOST, estimate, sums_bytes
from nbl.sizing.options import Options, default_batch_size, holdout_count
from nbl.sizing.shapes import ShapeError, shape_of
from nbl.sizing.spread import HEADROOM, Memory, Spread, spread

GiB = 2**30


def test_sums_and_defaults_are_the_engines():
    import torch

    from worker.engine.calibration import calibrate
    from worker.engine.calibration import stage as calibration_stage
    from worker.engine.calibration.stats import LayerAccumulator

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
    p8 = place(shape_of(LLAMA_8B), Options(), classes, 21600)  # too slow for the CPU; 16 GB x 1.25 fit 24 GiB
    assert p8.cls.name == "gpu-24g"
    assert p8.estimate.disk["offload"] == 0 and p8.estimate.phases["evaluate"]["device"] < 24 * GiB


def test_a_70b_job_goes_to_one_80gb_gpu_with_the_rest_of_its_weights_on_the_host():
    """Issue 12: calibration layer by layer, saving tensor by tensor, and a whole model (evaluation, load check)
    spread over the GPU and the host as placement.py does: a Llama-3.1-70B-shaped job runs on one 80 GB GPU."""
    classes = parse_classes(DEFAULT)
    p70 = place(shape_of(LLAMA_70B), Options(num_samples=256, seq_len=2048, ks=(8,)), classes, 21600)
    assert p70.cls.name == "gpu-80g", p70.reason
    est, model_b = p70.estimate, shape_of(LLAMA_70B).params * 2
    assert est.device_bytes <= 80 * GiB and est.disk["offload"] == 0
    on_gpu = int((80 * GiB - CUDA_CONTEXT_DEVICE) / HEADROOM)  # placement.plan's max_memory for the GPU
    assert est.phases["evaluate"]["host"] > model_b - on_gpu  # the rest offloaded to the host
    assert est.phases["save"]["host"] < model_b / 10  # one tensor at a time
    # 24 GiB would leave 52 GB of it on disk, read on every forward pass: not routed there
    only_24 = place(shape_of(LLAMA_70B), Options(num_samples=256, seq_len=2048, ks=(8,)), classes[:2], 21600)
    assert only_24.cls is None and "offloaded to disk beyond gpu-24g's GPUs and host" in only_24.reason
    # eight GPUs hold it all: nothing offloaded, each GPU under the one GPU's share
    eight = estimate(shape_of(LLAMA_70B), Options(ks=(8,)), classes[3].device_list(), classes[3].memory())
    assert eight.phases["evaluate"]["device"] <= est.phases["evaluate"]["device"] and eight.disk["offload"] == 0


def test_spread_is_the_workers_placement():
    from worker.engine import placement

    assert HEADROOM == placement.HEADROOM
    for weights in (10 * GiB, 70 * GiB, 300 * GiB):
        for gpus, free in ((1, 80 * GiB), (2, 24 * GiB), (4, 80 * GiB)):
            host = 256 * GiB
            plan = placement.plan(weights, [f"cuda:{i}" for i in range(gpus)], {i: free for i in range(gpus)}, host)
            got = spread(weights, gpus, Memory(free, host), context=0)
            if plan is None:
                assert got.device == weights and got.offloaded == (0, 0)
            else:
                assert got.device == min(weights, plan[0])
                assert got.host + got.disk == max(0, weights - sum(plan[i] for i in range(gpus)))
                assert got.host <= plan["cpu"]
    assert spread(10 * GiB, 0, Memory(), 0) == Spread(0, 10 * GiB, 0)  # the CPU: all on the host
    assert spread(500 * GiB, 1, Memory(), 0).device == 500 * GiB  # no device size: assumed to fit


def test_measured_selection_is_a_phase_that_streams_a_model_larger_than_its_device():
    opts = Options(num_samples=256, seq_len=2048, ks=(8,), criterion="greedy")
    small = estimate(shape_of(LLAMA_8B), opts, ["cuda:0"], Memory(80 * GiB, 256 * GiB))
    big = estimate(shape_of(LLAMA_70B), opts, ["cuda:0"], Memory(80 * GiB, 256 * GiB))
    assert small.phases["select"]["device"] > shape_of(LLAMA_8B).params * 2  # the whole 8B model stays on the GPU
    assert (
        big.phases["select"]["device"] < shape_of(LLAMA_70B).params * 2 / 4
    )  # 70B: a layer and a batch's logits at a time
    plain = estimate(shape_of(LLAMA_8B), Options(num_samples=256, seq_len=2048, ks=(8,)), ["cuda:0"])
    assert "select" not in plain.phases and small.seconds[0] > plain.seconds[0]


@pytest.mark.parametrize("bad", ["cpu", "cpu=0x0", "CPU=0x0/64", "a=1x2/3,a=1x2/3", ""])
def test_bad_classes_refused(bad):
    with pytest.raises(ValueError):
        parse_classes(bad)


def test_config_without_numbers_is_an_error():
    with pytest.raises(ShapeError, match="hidden_size"):
        shape_of({"num_hidden_layers": 2})


def test_fold_counts_its_lag_sums_and_the_mlp_outputs_it_keeps():
    import torch

    from worker.engine.calibration.stats import LayerAccumulator

    for lags in ((2,), (2, 3, 4)):
        assert (
            sums_bytes(64, 1, len(lags)) == LayerAccumulator(64, "cpu", torch.float32, ("block",), lags=lags).nbytes()
        )
    shape = shape_of(LLAMA_8B)
    base = dict(num_samples=32, seq_len=512, outputs=False, whole_model=False, dtype="bfloat16")
    d, layer = 4096, 32 * 512 * 4096 * 2  # one layer's MLP outputs over the calibration set, bf16
    for mode, ks, kept, lags in (("attn", (4, 8), 1, 0), ("block", (2, 4), 4, 3)):
        nbl, linear, fold = (
            estimate(shape, Options(mode=mode, ks=ks, form=f, **base), ["cpu"]) for f in ("nbl", "linear", "fold")
        )
        assert linear.phases == nbl.phases and linear.disk == nbl.disk  # linear regresses LN(h): nothing kept
        extra = kept * layer + 2 * lags * d * d * 8  # the sums are held twice while a shard is written
        assert fold.phases["calibrate"]["host"] - nbl.phases["calibrate"]["host"] == extra
        assert fold.disk["stats_cache"] - nbl.disk["stats_cache"] == 32 * lags * d * d * 8
