"""Data-parallel calibration (`--devices cpu,cpu`): two processes on gloo give the sums and scores of
one process (float64, relative 1e-10), on every family, with a number of batches the processes do
not divide evenly; a failing process surfaces in the parent, and a cancelled parent leaves no child."""

import multiprocessing
import time

import pytest
import torch
from one_pass_reference import one_pass_sums
from safetensors.torch import load_file, save_file
from test_sequential import assert_same_sums
from testkit.models import FAMILY_CONFIGS, family_param, save_tiny_checkpoint, tiny_model

from worker.engine.calibration.calibrate import calibrate
from worker.engine.calibration.distributed import CalibrationProcessError
from worker.engine.calibration.layer_source import CheckpointLayers, ModelLayers
from worker.engine.devices import backend_for, parse_devices, share
from worker.engine.scoring.scores import score_layer

# 9 blocks, 1 held out, 2 per batch: 4 fit batches + 1 held batch = 5, shared 3 + 2
BLOCKS, BATCH, HOLDOUT = 9, 2, 1


def _blocks(n=BLOCKS):
    return torch.randint(0, 128, (n, 24), generator=torch.Generator().manual_seed(1))


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def assert_same_scores(got, want, rel=1e-10):
    for g, w in zip(got, want):
        sg, sw = score_layer(g), score_layer(w)
        assert sg.keys() == sw.keys()
        for mode in sw:
            for name, value in sw[mode].as_dict().items():
                assert sg[mode].as_dict()[name] == pytest.approx(value, rel=rel, abs=1e-300), (mode, name)


@pytest.mark.parametrize("family", [family_param(f) for f in sorted(FAMILY_CONFIGS)])
def test_two_cpu_processes_give_the_sums_and_scores_of_one(family, tmp_path):
    path = save_tiny_checkpoint(tmp_path / family, family, layers=3)
    kw = dict(batch_size=BATCH, holdout=HOLDOUT, progress=False)
    one = calibrate(CheckpointLayers(path, torch.float32), _blocks(), **kw)
    layers = []
    cal = calibrate(
        CheckpointLayers(path, torch.float32),
        _blocks(),
        devices=["cpu", "cpu"],
        on_layer=lambda i, st: layers.append((i, st)),
        **kw,
    )
    assert [i for i, _ in layers] == [0, 1, 2] and cal.stats == []  # each layer once, from rank 0 only
    two = [st for _, st in layers]
    for a, b in zip(two, one.stats):  # every sum, shifts included
        fa, fb = a.to_flat("l"), b.to_flat("l")
        assert fa.keys() == fb.keys()
        assert max(_rel(fa[k], fb[k]) for k in fb) <= 1e-10
    assert_same_scores(two, one.stats)
    ref = one_pass_sums(tiny_model(family, layers=3), _blocks(), batch_size=BATCH, holdout=HOLDOUT)
    assert_same_sums(two, ref)
    assert float(two[0].splits["fit"].n) == (BLOCKS - HOLDOUT) * 24  # no block counted twice or lost
    assert float(two[0].splits["held"].n) == HOLDOUT * 24


def test_each_process_multiplies_with_the_thread_count_of_one(tmp_path):
    """A float32 product of 1024 tokens differs in its last bits between 1 and 2 threads; the sums
    still agree to 1e-10 because every process keeps the parent's thread count."""
    path = save_tiny_checkpoint(tmp_path / "llama", "llama", layers=1)
    blocks = torch.randint(0, 128, (5, 256), generator=torch.Generator().manual_seed(2))
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x = torch.randn(1024, 64, generator=torch.Generator().manual_seed(0))
        two_threads = torch.mm(x.T, x)
        torch.set_num_threads(1)
        if torch.equal(torch.mm(x.T, x), two_threads):  # then this test could not fail: say so, do not pass
            pytest.skip(
                "this machine's BLAS sums a 1024-token float32 product the same at 1 and 2 threads, so "
                "a process with the wrong thread count would go unnoticed here (seen on an AMD EPYC)"
            )
        torch.set_num_threads(2)
        kw = dict(batch_size=4, holdout=1, progress=False, modes=("attn",))
        one = calibrate(CheckpointLayers(path, torch.float32), blocks, **kw)
        two = calibrate(CheckpointLayers(path, torch.float32), blocks, devices=["cpu", "cpu"], **kw)
    finally:
        torch.set_num_threads(saved)
    fa, fb = two.stats[0].to_flat("l"), one.stats[0].to_flat("l")
    assert max(_rel(fa[k], fb[k]) for k in fb) <= 1e-10


def test_more_processes_than_batches_and_a_model_in_memory(tmp_path):
    """3 processes, 2 batches: the last adds zeros. Rank 0 calibrates the model in memory; the others
    read its checkpoint directory."""
    path = save_tiny_checkpoint(tmp_path / "qwen2", "qwen2", layers=2)
    model = tiny_model("qwen2", layers=2)
    kw = dict(batch_size=2, holdout=1, progress=False, modes=("block",))
    one = calibrate(model, _blocks(3), **kw)
    three = calibrate(ModelLayers(model, path), _blocks(3), devices=["cpu"] * 3, **kw)
    assert_same_scores(three.stats, one.stats)
    assert all(st.branches == ("block",) for st in three.stats)
    with pytest.raises(ValueError, match="checkpoint directory"):
        calibrate(model, _blocks(3), devices=["cpu", "cpu"], **kw)


def test_a_failing_process_raises_in_the_parent_with_its_error(tmp_path):
    """Rank 1 reads a checkpoint that lacks layer 1's weights: the parent, calibrating the intact
    model in memory, raises the child's error instead of waiting on it."""
    path = save_tiny_checkpoint(tmp_path / "llama", "llama", layers=3)
    model = tiny_model("llama", layers=3)
    file = path / "model.safetensors"
    tensors = load_file(file)
    save_file(
        {k: v for k, v in tensors.items() if not k.startswith("model.layers.1.")}, file, metadata={"format": "pt"}
    )
    t = time.monotonic()
    with pytest.raises(
        CalibrationProcessError,
        match=r"(?s)calibration process 1 of 2 \(on cpu\) failed: "
        r"Traceback.*Missing key.*self_attn\.q_proj\.weight",
    ):
        calibrate(
            ModelLayers(model, path),
            _blocks(),
            batch_size=BATCH,
            holdout=HOLDOUT,
            progress=False,
            devices=["cpu", "cpu"],
            timeout_s=300,
        )
    assert time.monotonic() - t < 120  # far below the collective timeout: no hang
    assert multiprocessing.active_children() == []


def test_a_cancelled_parent_leaves_no_process(tmp_path):
    path = save_tiny_checkpoint(tmp_path / "llama", "llama", layers=3)

    def cancel(done, total):
        raise KeyboardInterrupt("cancelled")

    with pytest.raises(KeyboardInterrupt, match="cancelled"):
        calibrate(
            CheckpointLayers(path, torch.float32),
            _blocks(),
            batch_size=BATCH,
            holdout=HOLDOUT,
            progress=False,
            devices=["cpu", "cpu"],
            on_batch=cancel,
        )
    assert multiprocessing.active_children() == []


def test_share_is_contiguous_covers_everything_and_puts_the_extra_first():
    assert share(5, 2) == [range(0, 3), range(3, 5)]
    assert share(2, 3) == [range(0, 1), range(1, 2), range(2, 2)]
    for n in range(12):
        for w in range(1, 5):
            runs = share(n, w)
            assert [i for r in runs for i in r] == list(range(n))
            assert max(map(len, runs)) - min(map(len, runs)) <= 1


def test_parse_devices():
    assert parse_devices(None, 0) == ["cpu"] and parse_devices("auto", 2) == ["cuda:0", "cuda:1"]
    assert parse_devices("cpu,cpu", 0) == ["cpu", "cpu"]
    assert parse_devices(" cuda , cuda:1", 2) == ["cuda:0", "cuda:1"]
    for bad, msg in [
        ("cuda:2", "2 CUDA device"),
        ("cpu,cuda:0", "not both"),
        ("tpu", "cpu or cuda"),
        ("cpu:1", "cpu or cuda"),
        ("cpu,,cpu", "cpu or cuda"),
    ]:
        with pytest.raises(ValueError, match=msg):
            parse_devices(bad, 1 if "2" not in bad else 2)


def test_backend():
    assert backend_for(["cuda:0", "cuda:1"]) == "nccl"
    assert backend_for(["cuda:0", "cuda:0"]) == "gloo" and backend_for(["cpu", "cpu"]) == "gloo"
