"""The dtype `nbl import-gguf` writes a GGUF's weights in: the precision they were stored with, never more.

A quantized GGUF (Q4_K, Q8_0, ...) holds a few bits a weight; float32 would only hold them in four bytes each
(a 98 MB Q4 SmolLM2 became a 529 MB checkpoint, and every output inherits its base's dtype through
`publish.dtype: auto`), so it is written in bfloat16, whose rounding (2^-9 relative) is far below the
quantization's. A float16 or float32 GGUF is kept as it is: float32 weights are float32 on purpose. Only the
matrices count: every converter stores norms and biases as F32 whatever the weights' type. Torch-free."""

from __future__ import annotations

from worker.engine.loading.gguf_header import Header

F32, F16, BF16 = 0, 1, 30  # ggml types; every other one is a quantized block format


def import_dtype(header: Header) -> str:
    """bfloat16, float16 or float32 for the GGUF whose header is `header` (module doc)."""
    types = {t.ggml_type for t in header.tensors if len(t.dims) >= 2}
    if types <= {F32}:
        return "float32"
    if types <= {F32, F16}:
        return "float16"
    return "bfloat16"
