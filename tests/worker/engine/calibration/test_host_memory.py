"""Layer-long host tensors in their own mappings (host_memory.py), and the hidden-state cache writing
a layer's outputs into its inputs' buffers (activations.HiddenCache.overwrite)."""

import torch
from safetensors.torch import load_file, save_file

from worker.engine.calibration.activations import HiddenCache
from worker.engine.calibration.host_memory import off_heap_copy, off_heap_zeros
from worker.engine.calibration.layer_source import CheckpointLayers


def _region(addr: int) -> tuple[str, str] | None:
    """(permissions, name) of the mapping of this process that holds `addr` (/proc/self/maps)."""
    for line in open("/proc/self/maps"):
        span, perms, _, _, _, *name = line.split()
        lo, hi = (int(a, 16) for a in span.split("-"))
        if lo <= addr < hi:
            return perms, " ".join(name)
    return None


def _mapped(t: torch.Tensor) -> bool:
    """Whether t's memory is a private anonymous mapping, not glibc's heap."""
    region = _region(t.data_ptr())
    return region is not None and region[0].endswith("p") and region[1] == ""


def test_off_heap_tensors_are_zero_writable_and_outside_the_heap(tmp_path):
    for shape in [(), (7,), (33, 65)]:
        t = off_heap_zeros(shape, torch.float64)
        assert t.shape == shape and t.dtype == torch.float64 and t.is_contiguous()
        assert float(t.abs().sum()) == 0.0
        t += 2.5
        assert float(t.sum()) == 2.5 * max(1, t.numel())
    # small enough (17 KB) that malloc would put it in the heap: only its own mapping passes
    big = off_heap_zeros((33, 65), torch.float64)
    assert _mapped(big) and not _mapped(torch.zeros(33, 65, dtype=torch.float64))
    gone = off_heap_zeros((33, 65), torch.float64)
    addr = gone.data_ptr()
    del gone
    assert _region(addr) is None  # handed back to the OS with the tensor
    src = torch.randn(30, 20)
    copy = off_heap_copy(src)
    assert torch.equal(copy, src) and copy.data_ptr() != src.data_ptr() and _mapped(copy)
    save_file({"big": big, "copy": copy}, str(tmp_path / "x.safetensors"))  # what the statistics cache does
    assert torch.equal(load_file(str(tmp_path / "x.safetensors"))["copy"], src)
    assert torch.equal(off_heap_zeros((0, 4), torch.float32), torch.zeros(0, 4))


def test_checkpoint_layer_weights_are_read_outside_the_heap(tmp_path):
    from testkit.models import save_tiny_checkpoint

    path = save_tiny_checkpoint(tmp_path / "tiny", "llama", layers=2)
    source = CheckpointLayers(path, torch.float32)
    layer = source.layer(1, "cpu")
    weights = dict(layer.named_parameters())
    assert weights and all(_mapped(w) for w in weights.values())
    source.release(1)


def test_overwrite_reuses_the_entry_buffer_and_put_does_not(tmp_path):
    with HiddenCache() as cache:
        first = torch.randn(2, 5, 8)
        cache.put(0, first)
        held = cache.get(0)
        new = torch.randn(2, 5, 8)
        cache.overwrite(0, new)
        assert cache.get(0) is held and torch.equal(held, new) and held.data_ptr() != new.data_ptr()
        cache.overwrite(0, torch.ones(2, 5, 4))  # another shape: a new entry
        assert cache.get(0).shape == (2, 5, 4) and cache.mem_bytes == 2 * 5 * 4 * 4
        shared = cache.get(0)
        cache.put(1, shared)  # two entries may share a tensor (loss_probe's dropped layer) ...
        cache.put(0, torch.zeros(2, 5, 4))  # ... and put never writes into it
        assert torch.equal(cache.get(1), torch.ones(2, 5, 4))
    with HiddenCache(budget_bytes=0, spill_dir=tmp_path) as cache:  # spilt entries are rewritten as files
        cache.put(0, torch.randn(3, 4))
        want = torch.randn(3, 4)
        cache.overwrite(0, want)
        assert torch.equal(cache.get(0), want) and cache.spilt_bytes == 3 * 4 * 4
