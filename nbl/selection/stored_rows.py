"""The rows a job stores for its outputs' layers (jobs.selected_layers), read back by the result (nbl/result.py
job_result): each k's mode and layers, the criterion that chose it when a measured selection did, the base's
family (where the output runs depends on it: nbl/outputs/forms.runs_in), the saved weights' dtype, and once the
quantize stage ran (publish.quantize) what llm-compressor did for each copy (the result's outputs[].quantized)."""

from __future__ import annotations


def selection_rows(
    mode: str,
    selected: dict[int, list[int]],
    measured: dict | None = None,
    family: str | None = None,
    dtypes: dict[int, str] | None = None,
) -> list[dict]:
    won = {c["k"]: c["criterion"] for c in (measured or {}).get("chosen", [])}  # the criterion that chose each k
    return [
        {
            "k": k,
            "mode": mode,
            "layers": v,
            **({"criterion": won[k]} if k in won else {}),
            **({"family": family} if family else {}),
            **({"dtype": dtypes[k]} if k in (dtypes or {}) else {}),
        }
        for k, v in selected.items()
    ]


QUANT_FACTS = ("method", "group_size", "unquantized", "llmcompressor", "compressed_tensors")


def with_quantized(rows: list[dict], facts: dict[int, dict[str, dict]]) -> list[dict]:
    """`rows` with each k's copies' facts {scheme: {method, group_size, unquantized, versions}} (worker/quant)."""
    return [
        {**r, "quantized": {s: {key: f.get(key) for key in QUANT_FACTS} for s, f in facts[r["k"]].items()}}
        if r["k"] in facts
        else r
        for r in rows
    ]
