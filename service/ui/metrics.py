"""What a result's metric paths mean on a page: a name, a unit, which way is better, whether it is a
figure to compare at all. `perplexity/wikitext2/ppl` reads "WikiText-2 perplexity", lower better;
`tasks/arc_easy/acc` "ARC-Easy accuracy" in %, higher better; `perplexity/wikitext2/tokens` (how
much was measured, not how well) is no column. Pure: the result's paths (nbl/result.py) in, text out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DATASETS = {
    "wikitext2": "WikiText-2",
    "c4": "C4",
    "arc_easy": "ARC-Easy",
    "arc_challenge": "ARC-Challenge",
    "hellaswag": "HellaSwag",
    "boolq": "BoolQ",
    "openbookqa": "OpenBookQA",
    "lambada_openai": "LAMBADA",
    "mmlu": "MMLU",
    "piqa": "PIQA",
    "winogrande": "WinoGrande",
}
HIDDEN = {
    "tokens",
    "n",
    "decode_context",
    "new_tokens",
    "repeats",
    "threads",
    "base_non_embedding_params",
    "device",
    "dtype",
    "sparsity",
}


@dataclass(frozen=True)
class Metric:
    path: str
    name: str
    unit: str  # "" for a plain number; "%" for a fraction shown in percent
    better: int  # +1 higher is better, -1 lower is better, 0 neither
    shown: bool = True

    @property
    def label(self) -> str:
        return (
            f"{self.name} ({self.unit})" if self.unit and self.unit != "%" else self.name + (" %" if self.unit else "")
        )


def describe(path: str) -> Metric:
    parts = path.split("/")
    family, leaf = parts[0], parts[-1]
    if len(parts) == 1:  # a family not measured at all ("speed": null)
        return Metric(path, path, "", 0, shown=family not in ("speed", "params"))
    name = DATASETS.get(parts[1], parts[1]) if len(parts) > 2 else ""
    if family in ("perplexity", "tasks") and len(parts) == 3:
        if leaf in HIDDEN:
            return Metric(path, f"{name} {leaf}", "", 0, shown=False)
        if leaf == "ppl":
            return Metric(path, f"{name} perplexity", "", -1)
        if leaf == "bits_per_byte":
            return Metric(path, f"{name} bits per byte", "bits/byte", -1)
        if leaf in ("acc", "acc_norm"):
            return Metric(path, f"{name} accuracy" + (" (normalized)" if leaf == "acc_norm" else ""), "%", +1)
    if family == "speed":
        if parts[1] == "prefill_tokens_per_s" and len(parts) == 3:
            return Metric(path, f"prefill at {parts[2]} tokens", "tokens/s", +1)
        if parts[1] == "decode_tokens_per_s":
            return Metric(path, "decode", "tokens/s", +1)
        if parts[1] == "kv_cache_bytes_per_token":
            return Metric(path, "KV cache", "bytes/token", -1)
        if parts[1] == "kv_cache_layers":
            return Metric(path, "KV-cache layers", "", -1)
        return Metric(path, path, "", 0, shown=False)  # the run's settings, and params again
    if family == "params" and len(parts) == 2:
        return Metric(path, "non-embedding parameters" if leaf == "non_embedding_params" else "parameters", "", -1)
    return Metric(path, path, "", 0)


def value(metric: Metric, x) -> str:
    """A value for a cell: accuracy in percent, counts with separators, else 4 significant digits."""
    if x is None or isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return "—" if x is None or isinstance(x, (int, float)) else str(x)
    if metric.unit == "%":
        return f"{x * 100:.1f}%"
    if x == int(x) and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:,.1f}" if abs(x) >= 1000 else f"{x:.4g}"


def delta(metric: Metric, d) -> str:
    """A difference: accuracy in percentage points, else as the value, with its sign."""
    if d is None or not isinstance(d, (int, float)) or not math.isfinite(d):
        return ""
    if metric.unit == "%":
        return f"{d * 100:+.1f} pts"
    text = value(metric, abs(d))
    return ("+" if d > 0 else "−" if d < 0 else "±") + text


def judge(metric: Metric, d) -> str:
    """ "better" / "worse" by the metric's direction, "" when it has none or nothing changed."""
    if not d or not metric.better or not isinstance(d, (int, float)) or not math.isfinite(d):
        return ""
    return "better" if (d > 0) == (metric.better > 0) else "worse"
