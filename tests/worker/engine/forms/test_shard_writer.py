"""The streamed writer (shard_writer.py, saving.write_compressed) writes exactly what save_pretrained of the
compressed model in memory writes: the same files, tensor names, shapes, dtypes, values, shards and index."""

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from testkit.models import FAMILY_CONFIGS, family_param, save_tiny_checkpoint, tiny_tokenizer
from transformers import AutoModelForCausalLM

from worker.engine.forms import surgery
from worker.engine.forms.saving import save_compressed, write_compressed
from worker.engine.forms.shard_writer import map_tensors, skeleton, write_shards
from worker.engine.scoring.scores import LinearMap

FAMILIES = sorted(FAMILY_CONFIGS)
CASES = [family_param(f, mode, method) for f in FAMILIES for mode in ("attn", "block") for method in ("nbl", "drop")]
PLAN_LAYERS = (0, 2)  # layer 0 included on purpose


def _maps(d: int, seed: int = 1) -> dict[int, LinearMap]:
    g = torch.Generator().manual_seed(seed)
    return {
        i: LinearMap(
            torch.randn(d, d, generator=g, dtype=torch.float64) / d,
            torch.randn(d, generator=g, dtype=torch.float64),
            0.0,
        )
        for i in PLAN_LAYERS
    }


def _tensors(directory: Path) -> dict[str, torch.Tensor]:
    out = {}
    for f in sorted(directory.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            out.update({k: st.get_tensor(k) for k in st.keys()})
    return out


def _shard_of(directory: Path) -> dict[str, str]:
    out = {}
    for f in sorted(directory.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            out.update({k: f.name for k in st.keys()})
    return out


def _same_output(a: Path, b: Path) -> None:
    assert sorted(p.name for p in a.iterdir()) == sorted(p.name for p in b.iterdir())
    for f in a.glob("*.json"):  # config.json, generation_config.json, tokenizer files, nbl_scores.json, index
        assert json.loads(f.read_text()) == json.loads((b / f.name).read_text()), f.name
    assert (a / "modeling_nbl.py").read_bytes() == (b / "modeling_nbl.py").read_bytes()
    ta, tb = _tensors(a), _tensors(b)
    assert list(ta) == list(tb)  # names (and safetensors' own order within a file)
    for name, t in ta.items():
        assert tb[name].dtype == t.dtype and tb[name].shape == t.shape, name
        assert torch.equal(tb[name], t), name
    assert _shard_of(a) == _shard_of(b)


def _in_memory_and_streamed(tmp_path: Path, family: str, mode: str, method: str, dtype=torch.float32, **kw):
    base = save_tiny_checkpoint(tmp_path / "base", family, **kw)
    plan = surgery.Plan(mode, method, PLAN_LAYERS)
    maps = _maps(64) if method == "nbl" else {}
    report = {"layers": [], "replaced_layers": list(PLAN_LAYERS)}
    model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype).eval()
    with surgery.replaced(model, plan, maps):
        want = save_compressed(model, tiny_tokenizer(), tmp_path / "memory", family, report)
        ids = torch.randint(2, 100, (2, 12), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            logits = model(ids).logits
    got = write_compressed(base, plan.as_config(), maps, dtype, tiny_tokenizer(), tmp_path / "streamed", family, report)
    return want, got, ids, logits


@pytest.mark.parametrize("family,mode,method", CASES)
def test_streamed_output_equals_the_in_memory_save(family, mode, method, tmp_path):
    want, got, ids, logits = _in_memory_and_streamed(tmp_path, family, mode, method)
    _same_output(want, got)
    assert not (tmp_path / "streamed.partial").exists()
    names = set(_tensors(got))
    assert "model.layers.0.self_attn.o_proj.weight" not in names and "model.layers.1.self_attn.o_proj.weight" in names
    lin = "model.layers.2.self_attn.linear.weight" if mode == "attn" else "model.layers.2.linear.weight"
    assert (lin in names) == (method == "nbl")
    reloaded = AutoModelForCausalLM.from_pretrained(got, trust_remote_code=True, dtype=torch.float32).eval()
    with torch.no_grad():
        assert torch.equal(reloaded(ids).logits, logits)


@pytest.mark.parametrize("tied,dtype", [(True, torch.float32), (False, torch.bfloat16), (True, torch.bfloat16)])
def test_tied_embeddings_and_bf16_as_save_pretrained(tied, dtype, tmp_path):
    """Tied: no lm_head.weight is written (save_pretrained drops the alias); bf16: the float32 base's
    tensors are cast as from_pretrained(dtype=bfloat16) casts them, maps included."""
    want, got, _, _ = _in_memory_and_streamed(tmp_path, "llama", "attn", "nbl", dtype, tie_word_embeddings=tied)
    _same_output(want, got)
    tensors = _tensors(got)
    assert ("lm_head.weight" in tensors) == (not tied)
    assert {t.dtype for t in tensors.values()} == {dtype}
    assert json.loads((got / "config.json").read_text())["dtype"] == str(dtype).split(".")[1]


@pytest.mark.parametrize("mode", ["attn", "block"])
def test_several_shards_with_the_index_as_save_pretrained(mode, tmp_path):
    """A max shard size below the model's size: the same shards, file names and index as save_pretrained
    with that size (one tensor larger than the limit gets a shard of its own)."""
    base = save_tiny_checkpoint(tmp_path / "base", "qwen2", layers=12)  # layer 10 sorts after layer 9
    plan, maps, size = surgery.Plan(mode, "nbl", PLAN_LAYERS), _maps(64), 40_000  # embeddings: 32 KB
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    (tmp_path / "memory").mkdir()
    (tmp_path / "streamed").mkdir()
    with surgery.replaced(model, plan, maps):
        model.save_pretrained(tmp_path / "memory", safe_serialization=True, max_shard_size=size)
    written = write_shards(
        tmp_path / "streamed",
        base,
        skeleton(model.config, torch.float32, plan.as_config()),
        map_tensors(plan.as_config(), maps),
        max_shard_size=size,
    )
    assert len(written) > 3 and written[-1] == "model.safetensors.index.json"
    assert sorted(written) == sorted(p.name for p in (tmp_path / "memory").glob("model*"))
    index = json.loads((tmp_path / "streamed" / "model.safetensors.index.json").read_text())
    assert index == json.loads((tmp_path / "memory" / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(_tensors(tmp_path / "streamed"))
    ta, tb = _tensors(tmp_path / "memory"), _tensors(tmp_path / "streamed")
    assert ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) and ta[k].dtype == tb[k].dtype for k in ta)
    assert _shard_of(tmp_path / "memory") == _shard_of(tmp_path / "streamed")


def test_a_base_without_a_tensor_the_output_needs_is_refused(tmp_path):
    base = save_tiny_checkpoint(tmp_path / "base", "llama")
    (base / "model.safetensors").rename(base / "model-renamed.safetensors")  # found by the shards' headers
    from safetensors.torch import load_file, save_file

    tensors = load_file(base / "model-renamed.safetensors")
    del tensors["model.layers.3.mlp.up_proj.weight"]
    save_file(tensors, base / "model-renamed.safetensors", metadata={"format": "pt"})
    plan = surgery.Plan("attn", "drop", PLAN_LAYERS)
    with pytest.raises(ValueError, match="lacks 1 tensors"):
        write_compressed(base, plan.as_config(), {}, torch.float32, tiny_tokenizer(), tmp_path / "out", "llama", {})
    assert not (tmp_path / "out").exists()


def _copy_file_range_calls(monkeypatch, fail_after: int | None = None) -> list[int]:
    """Record os.copy_file_range's byte counts; with `fail_after`, copy that many bytes of the first call,
    then refuse (EXDEV) every call, as between two filesystems."""
    import errno
    import os

    from worker.engine.forms import shard_writer

    real, calls = os.copy_file_range, []

    def spy(src, dst, count, offset_src=None, *args):
        if fail_after is not None and calls:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        done = real(src, dst, count if fail_after is None else min(count, fail_after), offset_src, *args)
        calls.append(done)
        return done

    monkeypatch.setattr(shard_writer.os, "copy_file_range", spy)
    return calls


@pytest.mark.parametrize("fail_after", [None, 0, 1000])
def test_unchanged_tensors_are_copied_file_to_file_or_read_where_refused(fail_after, tmp_path, monkeypatch):
    """A float32 output of a float32 base: every unchanged tensor's bytes go from file to file without being
    loaded (copy_file_range), the output as save_pretrained's; refused at once or midway through a tensor,
    the rest is read and written, and the output is the same."""
    calls = _copy_file_range_calls(monkeypatch, fail_after)
    want, got, _, _ = _in_memory_and_streamed(tmp_path, "llama", "attn", "nbl")
    _same_output(want, got)
    if fail_after is None:
        maps = {n for n in _tensors(got) if ".linear." in n}
        copied = {n: t for n, t in _tensors(got).items() if n not in maps}
        assert sum(calls) == sum(t.numel() * t.element_size() for t in copied.values())
    else:
        assert len(calls) == 1 and calls[0] == fail_after


def test_a_cast_output_loads_each_tensor_and_copies_none(tmp_path, monkeypatch):
    calls = _copy_file_range_calls(monkeypatch)
    want, got, _, _ = _in_memory_and_streamed(tmp_path, "llama", "block", "nbl", torch.bfloat16)
    _same_output(want, got)
    assert calls == []


def test_a_tensor_past_the_end_of_its_file_is_refused(tmp_path):
    """A base cut short after its header was read (it is checked before): an error naming it, not a short file."""
    from worker.engine.forms.shard_writer import Span, copy_span

    src = tmp_path / "base.bin"
    src.write_bytes(bytes(range(256)) * 4)
    with open(tmp_path / "out.bin", "wb", buffering=0) as out:
        copy_span(Span(src, 1000, 24), out)
        with pytest.raises(ValueError, match="ends before the 100 bytes"):
            copy_span(Span(src, 1000, 100), out)
    assert (tmp_path / "out.bin").read_bytes()[:24] == src.read_bytes()[1000:]


def test_a_shard_whose_header_lies_is_refused_not_copied(tmp_path):
    """A sharded base (its index read, no shard opened before): a shard whose header gives a tensor more
    bytes than its dtype and shape hold is refused by safetensors' check, before any byte is copied."""
    import struct

    from safetensors import SafetensorError

    base = save_tiny_checkpoint(tmp_path / "base", "llama")
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    sharded = tmp_path / "sharded"
    model.save_pretrained(sharded, safe_serialization=True, max_shard_size=40_000)
    tiny_tokenizer().save_pretrained(sharded)
    for shard in sorted(sharded.glob("model-*.safetensors")):  # the first with two tensors or more
        raw = shard.read_bytes()
        size = struct.unpack("<Q", raw[:8])[0]
        header = json.loads(raw[8 : 8 + size])
        if len(header) > 2:
            break
    first, second = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])[:2]
    cut = header[first]["data_offsets"][1] - 4  # the first tensor 4 bytes short, the next 4 bytes longer
    header[first]["data_offsets"][1] = header[second]["data_offsets"][0] = cut
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (size - len(text)) if len(text) <= size else b""
    assert len(text) == size
    shard.write_bytes(raw[:8] + text + raw[8 + size :])
    plan = surgery.Plan("attn", "nbl", PLAN_LAYERS)
    with pytest.raises(SafetensorError):
        write_compressed(
            sharded,
            plan.as_config(),
            _maps(64),
            torch.float32,
            tiny_tokenizer(),
            tmp_path / "out",
            "llama",
            {"layers": [], "replaced_layers": list(PLAN_LAYERS)},
        )
    assert not (tmp_path / "out").exists()
