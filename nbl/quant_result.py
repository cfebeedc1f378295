"""The quantized outputs in a job's result (publish.quantize, issue 39): per output, each scheme's copy with its
size and its evaluation against the (unquantized) base; and the base quantized alike, so that base, base +
scheme, NBL and NBL + scheme stand side by side.

Stored rows: the evaluation's variants "k4+w4a16" and "base+w4a16" (flat metrics, as "k4"), and the flat variant
QUANTIZATION {"k4/w4a16/bytes", "k4/w4a16/calibration_tokens", "base/w4a16/bytes", ...} (worker/quant/stage.py).
What the library did beyond that (method, group, versions, modules left unquantized) is stored on the output's
selection row (nbl/selection/stored_rows.with_quantized), and in each copy's quantization.json and its card. Pure:
the API imports this.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from nbl.selection.stored_rows import QUANT_FACTS

QUANTIZATION = "quantization"  # the stored variant of the quantized copies' facts


def schemes_in(flat: Mapping[str, Any] | None, who: str) -> list[str]:
    """The schemes `who` ("k4", "base") was quantized by, in stored order."""
    return list(dict.fromkeys(key.split("/")[1] for key in flat or {} if key.startswith(f"{who}/")))


def copies(
    who: str,
    facts: Mapping[str, Any] | None,
    metrics: Mapping[str, Mapping[str, Any]],
    nested: Callable[[str], dict | None],
    base: Mapping | None,
    delta,
    relative,
    done: Mapping[str, Mapping] | None = None,
) -> list[dict]:
    """[{scheme, path, bytes, calibration_tokens, metrics, delta, relative}] of `who`'s quantized copies; delta and
    relative against the unquantized base. `nested(variant)`: the stored flat metrics as the result nests them;
    `done`: {scheme: what llm-compressor did} from the output's selection row (None: not stored, or the base)."""
    out = []
    for s in schemes_in(facts, who):
        m = nested(f"{who}+{s}")
        got = {key: (facts or {}).get(f"{who}/{s}/{key}") for key in ("bytes", "calibration_tokens")}
        out.append(
            {
                "scheme": s,
                "path": s,  # the folder inside its output (the base's is never published)
                "bytes": None if got["bytes"] is None else int(got["bytes"]),
                "calibration_tokens": None if got["calibration_tokens"] is None else int(got["calibration_tokens"]),
                **{key: ((done or {}).get(s) or {}).get(key) for key in QUANT_FACTS},
                "metrics": m,
                "delta": delta(m, base),
                "relative": relative(m, base),
            }
        )
    return out
