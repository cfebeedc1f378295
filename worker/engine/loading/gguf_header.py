"""A GGUF file's header walked before anything else reads it: every count and length checked against the
bytes the file has left, so a lying file is one ValueError naming what is wrong, not a struct.error traceback
from the reader after it, nor a loop over 2^62 entries.

    magic "GGUF" | version u32 (2, 3) | tensor_count u64 | kv_count u64 | KVs | tensor infos | pad | data
    KV           key (u64 length + UTF-8) | value type u32 | value
    tensor info  name | n_dims u32 | dims u64 x n_dims | ggml type u32 | offset u64 from the data's start

Bounds: a count is refused when even its smallest entries could not fit in what is left (a KV takes 13 bytes at
least, a tensor info 24, an array item its width or 8 for a string's length), before any loop; a string or
array longer than what is left likewise. Tensors have at most 4 dims (ggml's GGML_MAX_DIMS), a known ggml type,
and their data inside the file. Little-endian only, as llama.cpp and transformers' reader read it. Torch-free.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # transformers' reader: v1 counted in 32 bits
MAX_DIMS = 4  # ggml's GGML_MAX_DIMS
ALIGNMENT = 32  # general.alignment's default
STRING, ARRAY = 8, 9
# value type -> struct format: u8 i8 bool u16 i16 u32 i32 f32 u64 i64 f64
FIXED = {0: "B", 1: "b", 7: "?", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 10: "Q", 11: "q", 12: "d"}
MIN_KV = 8 + 4 + 1  # empty key, type, a one-byte value
MIN_TENSOR = 8 + 4 + 4 + 8  # empty name, no dims, type, offset


class GGUFError(ValueError):
    """A file that is not a GGUF this engine can read (a user error: exit 2, `user`)."""


@dataclass(frozen=True)
class Tensor:
    name: str
    dims: tuple[int, ...]  # ggml order, fastest first
    ggml_type: int
    offset: int  # from the data section's start


@dataclass(frozen=True)
class Header:
    version: int
    metadata: dict  # scalar and string values; an array is its item count
    tensors: tuple[Tensor, ...]
    data_start: int


class _Cursor:
    """Reads a file front to back, refusing any read longer than what is left."""

    def __init__(self, f, size: int):
        self.f, self.size, self.pos = f, size, 0

    def left(self) -> int:
        return self.size - self.pos

    def need(self, n: int, what: str) -> None:
        if n > self.left():
            raise GGUFError(
                f"{what}: {n:,} bytes at offset {self.pos:,}, but the file has {self.left():,} left "
                "(truncated or corrupt)"
            )

    def take(self, n: int, what: str) -> bytes:
        self.need(n, what)
        self.pos += n
        return self.f.read(n)

    def skip(self, n: int, what: str) -> None:
        self.need(n, what)
        self.pos += n
        self.f.seek(self.pos)

    def unpack(self, fmt: str, what: str) -> tuple:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))

    def count(self, n: int, least: int, what: str) -> int:
        """A count of entries of at least `least` bytes each, refused when they could not all fit."""
        if n * least > self.left():
            raise GGUFError(
                f"{what}: {n:,} claimed, but the {self.left():,} bytes left hold at most {self.left() // least:,}"
            )
        return n

    def string(self, what: str, keep: bool = True) -> str | None:
        (n,) = self.unpack("Q", f"{what} (its length)")
        if not keep:
            self.skip(n, what)
            return None
        raw = self.take(n, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise GGUFError(f"{what} at offset {self.pos - n:,} is not UTF-8") from None


def _value(cur: _Cursor, kind: int, key: str):
    """One metadata value: a scalar, a string, or an array's item count (its items are checked, not kept)."""
    if kind in FIXED:
        return cur.unpack(FIXED[kind], f"metadata {key!r}")[0]
    if kind == STRING:
        return cur.string(f"metadata {key!r}")
    if kind != ARRAY:
        raise GGUFError(f"metadata {key!r}: value type {kind}, which GGUF does not define")
    item, n = cur.unpack("IQ", f"metadata {key!r} (array header)")
    what = f"metadata {key!r} (array items)"
    if item in FIXED:
        width = struct.calcsize(FIXED[item])
        cur.skip(cur.count(n, width, what) * width, what)
    elif item == STRING:
        for _ in range(cur.count(n, 8, what)):
            cur.string(what, keep=False)
    else:  # nested arrays: no reader of ours takes them
        raise GGUFError(f"metadata {key!r}: an array of value type {item}, which this reader does not take")
    return n


def _tensor(cur: _Cursor, i: int) -> Tensor:
    name = cur.string(f"tensor {i} (name)")
    (n_dims,) = cur.unpack("I", f"tensor {name!r} (dimension count)")
    if n_dims > MAX_DIMS:
        raise GGUFError(f"tensor {name!r}: {n_dims:,} dimensions claimed; ggml has at most {MAX_DIMS}")
    dims = cur.unpack(f"{n_dims}Q", f"tensor {name!r} (dimensions)")
    ggml_type, offset = cur.unpack("IQ", f"tensor {name!r} (type and offset)")
    return Tensor(name, dims, ggml_type, offset)


def read_header(f, size: int) -> Header:
    """The header of the GGUF file `f` (binary, at offset 0) of `size` bytes; GGUFError when it lies."""
    cur = _Cursor(f, size)
    if cur.left() < 4 or cur.take(4, "the magic") != MAGIC:
        raise GGUFError("it does not start with the GGUF magic bytes: not a GGUF file")
    version, n_tensors, n_kvs = cur.unpack("IQQ", "the header (version, tensor and metadata counts)")
    if version not in VERSIONS:
        raise GGUFError(f"GGUF version {version}; this reader takes versions {' and '.join(map(str, VERSIONS))}")
    metadata = {}
    for _ in range(cur.count(n_kvs, MIN_KV, "metadata entries")):
        key = cur.string("a metadata key")
        (kind,) = cur.unpack("I", f"metadata {key!r} (value type)")
        metadata[key] = _value(cur, kind, key)
    tensors = tuple(_tensor(cur, i) for i in range(cur.count(n_tensors, MIN_TENSOR, "tensor infos")))
    if not isinstance(metadata.get("general.architecture"), str):
        raise GGUFError("its metadata has no general.architecture string")
    align = metadata.get("general.alignment", ALIGNMENT)
    if isinstance(align, bool) or not isinstance(align, int) or align <= 0 or align & (align - 1):
        raise GGUFError(f"general.alignment is {align!r}; it must be a power of two")
    return Header(version, metadata, tensors, cur.pos + (-cur.pos % align))


def tensor_bytes(t: Tensor, sizes: dict[int, tuple[int, int]]) -> int:
    """The bytes a tensor's data takes: `sizes` maps a ggml type to (elements a block, bytes a block)."""
    if t.ggml_type not in sizes:
        raise GGUFError(f"tensor {t.name!r}: ggml type {t.ggml_type}, which ggml does not define")
    block, nbytes = sizes[t.ggml_type]
    elements = 1
    for d in t.dims:
        elements *= d
    if t.dims and t.dims[0] % block:
        raise GGUFError(f"tensor {t.name!r}: rows of {t.dims[0]:,} are not whole blocks of {block}")
    return elements // block * nbytes


def check_extents(header: Header, size: int, sizes: dict[int, tuple[int, int]]) -> None:
    """Every tensor's data inside the file."""
    for t in header.tensors:
        end = header.data_start + t.offset + tensor_bytes(t, sizes)
        if end > size:
            raise GGUFError(
                f"tensor {t.name!r}: its data ends at byte {end:,}, past the file's end ({size:,}): "
                "truncated or corrupt"
            )


def check_gguf(path: Path, source: str) -> Header:
    """The header of the GGUF at `path`, its tensors inside the file; GGUFError naming `source` when not."""
    from gguf.constants import GGML_QUANT_SIZES  # torch-free: the ggml types and their block sizes

    sizes = {int(k): v for k, v in GGML_QUANT_SIZES.items()}
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            header = read_header(f, size)
        check_extents(header, size, sizes)
    except GGUFError as e:
        raise GGUFError(f"{source}: not a GGUF file this engine can read: {e}") from None
    return header
