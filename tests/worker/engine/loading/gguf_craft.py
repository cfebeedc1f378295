"""A GGUF v3 file built byte by byte, well formed or broken on purpose (the import's hostile-input tests).

    magic "GGUF" | version u32 | tensor_count u64 | kv_count u64 | KVs | tensor infos | padding | data
    KV           key (u64 length + UTF-8) | value type u32 | value (an array: item type u32, count u64, items)
    tensor info  name | n_dims u32 | dims u64 x n_dims | ggml type u32 | offset u64 (from the data's start)

Little-endian throughout, as llama.cpp writes it. Each builder returns bytes; `broken()` names fourteen ways a file
can lie, each on an otherwise valid file.
"""

from __future__ import annotations

import struct

U8, I32, U32, F32, BOOL, STRING, ARRAY, U64 = 0, 5, 4, 6, 7, 8, 9, 10
F32_TENSOR = 0  # ggml type
ALIGN = 32


def string(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def value(kind: int, v) -> bytes:
    if kind == STRING:
        return string(v)
    if kind == ARRAY:
        item, items = v
        return struct.pack("<IQ", item, len(items)) + b"".join(value(item, x) for x in items)
    return struct.pack({U8: "<B", I32: "<i", U32: "<I", F32: "<f", BOOL: "<?", U64: "<Q"}[kind], v)


def kv(key: str, kind: int, v) -> bytes:
    return string(key) + struct.pack("<I", kind) + value(kind, v)


def tensor_info(name: str, dims: list[int], ggml_type: int = F32_TENSOR, offset: int = 0) -> bytes:
    return string(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, ggml_type, offset)


def header(tensors: int, kvs: int, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, tensors, kvs)


METADATA = [
    ("general.architecture", STRING, "llama"),
    ("general.alignment", U32, ALIGN),
    ("tokenizer.ggml.tokens", ARRAY, (STRING, ["<s>", "</s>", "a"])),
]


def gguf(
    kvs: list[bytes] | None = None, infos: list[bytes] | None = None, data: bytes | None = None, version: int = 3
) -> bytes:
    """A whole file: by default one 4 x 2 float32 tensor and the metadata above."""
    kvs = [kv(*m) for m in METADATA] if kvs is None else kvs
    infos = [tensor_info("token_embd.weight", [2, 4])] if infos is None else infos
    data = bytes(4 * 8) if data is None else data
    head = header(len(infos), len(kvs), version) + b"".join(kvs) + b"".join(infos)
    return head + bytes(-len(head) % ALIGN) + data


def broken() -> dict[str, bytes]:
    """Fourteen malformed files, by what is wrong with them."""
    good = gguf()
    kvs = [kv(*m) for m in METADATA]
    return {
        "empty": b"",
        "truncated header": good[:14],  # magic, version and half the tensor count
        "truncated file": good[: len(good) - 40],  # cut inside the tensor infos
        "bad magic": b"GGUX" + good[4:],
        "version 99": gguf(version=99),
        "2^63 tensors": header(2**63, len(kvs)) + b"".join(kvs),
        "2^62 KVs": header(1, 2**62) + b"".join(kvs),
        "2^62 string length": header(0, 1) + struct.pack("<Q", 2**62) + b"general.architecture",
        "2^60-element array": header(0, 1) + string("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARRAY, U8, 2**60),
        "2^31 dims": header(1, len(kvs)) + b"".join(kvs) + string("t") + struct.pack("<I", 2**31) + bytes(64),
        "unknown value type": gguf(kvs=[*kvs, string("x") + struct.pack("<I", 99) + bytes(8)]),
        "tensor past the end": gguf(infos=[tensor_info("token_embd.weight", [2, 4], offset=4096)]),
        "unknown ggml type": gguf(infos=[tensor_info("token_embd.weight", [2, 4], ggml_type=999)]),
        "alignment 0": gguf(kvs=[kv("general.architecture", STRING, "llama"), kv("general.alignment", U32, 0)]),
    }
