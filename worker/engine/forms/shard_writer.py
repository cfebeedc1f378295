"""Write a compressed model's safetensors shards tensor by tensor from the base checkpoint's shards.

The output is what `save_pretrained` of the compressed model in memory writes, without that model:

    names, order, shapes, dtypes   the state dict of a meta-device skeleton (the base's config, then
                                   modeling_nbl.apply_nbl), tied weights removed as save_pretrained does
    values                         each tensor read alone from the base's shards (cast to the output's
                                   dtype, as from_pretrained would), or a fitted map
    shards                         huggingface_hub's split (save_pretrained's: state-dict order, a new
                                   shard when the next tensor would pass max_shard_size), files
                                   model.safetensors or model-0000i-of-0000n.safetensors + the index

Each file is written by hand in the safetensors format (a little-endian u64 header length, a JSON
header padded with spaces to 8 bytes, then the raw tensors), so host memory holds one tensor at a
time, not one shard (save_pretrained's default shard is 50 GB). A base tensor already in the output's
dtype and shape (most of them, when the dtype is the base's) is not loaded at all: its bytes are
copied file to file by the kernel (os.copy_file_range; a read and write where that is refused), with
no copy in host memory: SmolLM2's float32 output (538 MB) in 0.33 s against 0.51 s loading each tensor
(medians of 5, bench/write_output.py).
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from worker.engine.calibration.layer_source import tensor_files
from worker.engine.loading.checkpoint_names import to_checkpoint
from worker.engine.modeling.modeling_nbl import apply_nbl

MAX_SHARD_SIZE = "50GB"  # transformers' save_pretrained default
INDEX_FILE = "model.safetensors.index.json"
SAFETENSORS_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.bfloat16: "BF16",
    torch.float16: "F16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}


def skeleton(config, dtype: torch.dtype, plan: dict):
    """The compressed model on the meta device: its structure and dtypes, no weights."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return apply_nbl(model.eval(), plan)


def layout(model) -> dict[str, torch.Tensor]:
    """Name -> meta tensor, in the order save_pretrained writes a model loaded by from_pretrained (its
    weight-format conversion sorts the names, layer numbers as numbers), tied copies left out, under the names
    save_pretrained gives them (checkpoint_names.py)."""
    from transformers.core_model_loading import dot_natural_key
    from transformers.modeling_utils import remove_tied_weights_from_state_dict

    state = remove_tied_weights_from_state_dict(model.state_dict(), model)
    state = to_checkpoint(model, state)  # a MoE family's experts one by one, under the checkpoint's names
    return dict(sorted(state.items(), key=lambda kv: dot_natural_key(kv[0])))


def map_tensors(plan: dict, maps: dict) -> dict[str, torch.Tensor]:
    """The fitted maps under the names modeling_nbl gives them (none for drop)."""
    if plan["method"] != "nbl":
        return {}
    where = "self_attn.linear" if plan["mode"] == "attn" else "linear"
    return {f"model.layers.{i}.{where}.{p}": getattr(maps[i], p) for i in plan["layers"] for p in ("weight", "bias")}


@dataclass(frozen=True)
class Span:
    """A base tensor's raw bytes: `length` bytes at `offset` of the file at `path`."""

    path: Path
    offset: int
    length: int


def spans(path: Path) -> dict[str, tuple[str, list[int], Span]]:
    """Name -> (safetensors dtype, shape, Span) of each tensor of the safetensors file at `path`, once
    safetensors has checked its header (offsets in order, each as long as its dtype and shape, covering the
    file): a shard named by an index was not opened before, and its bytes are copied unread."""
    from safetensors import safe_open

    with safe_open(str(path), "pt"):
        pass
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
    header.pop("__metadata__", None)
    return {
        name: (
            h["dtype"],
            h["shape"],
            Span(path, 8 + size + h["data_offsets"][0], h["data_offsets"][1] - h["data_offsets"][0]),
        )
        for name, h in header.items()
    }


def copy_span(span: Span, out) -> None:
    """Append `span`'s bytes to `out` (an unbuffered file), in the kernel where it can."""
    offset, left = span.offset, span.length
    with open(span.path, "rb", buffering=0) as src:
        try:
            while left:
                done = os.copy_file_range(src.fileno(), out.fileno(), left, offset)
                if not done:
                    break  # the file is shorter than its header says: the read below says so
                offset, left = offset + done, left - done
        except (AttributeError, OSError):  # not Linux, or not between these two filesystems
            pass
        src.seek(offset)
        while left:
            chunk = src.read(min(left, 64 << 20))
            if not chunk:
                raise ValueError(f"{span.path}: ends before the {span.length} bytes its header gives a tensor")
            out.write(chunk)
            left -= len(chunk)


def write_safetensors(
    path: Path, entries: dict[str, torch.Tensor], value: Callable[[str], torch.Tensor | Span]
) -> None:
    """One safetensors file: `entries` (meta tensors) give the header; `value(name)` each tensor, in turn
    (a Span: bytes already in the entry's dtype and shape)."""
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, t in entries.items():
        size = t.numel() * t.element_size()
        header[name] = {
            "dtype": SAFETENSORS_DTYPES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb", buffering=0) as f:  # unbuffered: copy_span writes at the file's own position
        f.write(struct.pack("<Q", len(raw)) + raw)
        for name, want in entries.items():
            t = value(name)
            if isinstance(t, Span):
                copy_span(t, f)
                continue
            if t.shape != want.shape:
                raise ValueError(
                    f"{name}: shape {tuple(t.shape)} in the base, the compressed model expects {tuple(want.shape)}"
                )
            t = t.detach().to("cpu", want.dtype).contiguous()
            f.write(memoryview(t.reshape(-1).view(torch.uint8).numpy()))
            del t


def write_shards(
    out: Path,
    base: Path,
    model,
    extra: dict[str, torch.Tensor],
    max_shard_size: int | str = MAX_SHARD_SIZE,
    source: Callable[[str], str] = str,
) -> list[str]:
    """Write `model`'s (a skeleton's) weights into `out`: `extra[name]` where given, else the base's
    tensor named `source(name)` (the same name, or another layer's for an output with fewer layers).
    Returns the file names written (shards, then the index if sharded)."""
    from huggingface_hub.serialization import split_state_dict_into_shards_factory

    entries = layout(model)
    split = split_state_dict_into_shards_factory(
        entries,
        get_storage_size=lambda t: t.numel() * t.element_size(),
        filename_pattern="model{suffix}.safetensors",
        max_shard_size=max_shard_size,
    )
    files = tensor_files(Path(base))
    missing = [n for n in entries if n not in extra and source(n) not in files]
    if missing:
        raise ValueError(
            f"the base checkpoint {base} lacks {len(missing)} tensors of the compressed model, e.g. {missing[:3]}"
        )
    from safetensors import safe_open

    headers: dict[str, dict] = {}

    def value(name: str) -> torch.Tensor | Span:
        if name in extra:
            return extra[name]
        file = files[source(name)]
        if file not in headers:
            headers[file] = spans(Path(base) / file)
        dtype, shape, span = headers[file][source(name)]
        want = entries[name]
        if (
            dtype == SAFETENSORS_DTYPES.get(want.dtype)
            and shape == list(want.shape)
            and span.length == want.numel() * want.element_size()
        ):
            return span
        # opened per tensor: the file's mapping goes with it, so the host holds one tensor (pages of a
        # mapping kept open stay resident: the whole base, once every tensor was read)
        with safe_open(str(Path(base) / file), "pt", device="cpu") as f:
            return f.get_tensor(source(name))

    for shard, names in split.filename_to_tensors.items():
        write_safetensors(Path(out) / shard, {n: entries[n] for n in names}, value)
    written = list(split.filename_to_tensors)
    if split.is_sharded:
        index = {
            "metadata": {"total_parameters": model.num_parameters(), **split.metadata},
            "weight_map": split.tensor_to_filename,
        }
        (Path(out) / INDEX_FILE).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
        written.append(INDEX_FILE)
    return written
