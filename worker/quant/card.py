"""The card's "Quantized" section (publish.quantize, issue 39): each copy of this output in its SCHEME/ folder, what
llm-compressor did (quantization.json), and, when the job evaluated, base, base + scheme, NBL and NBL + scheme
side by side, so the reader sees how NBL and quantization compound."""

from __future__ import annotations

import json
from pathlib import Path

from nbl.gates import ACC_METRIC, PPL_METRIC
from nbl.outputs.quant_schemes import SCHEMES

from ..engine.placement import weight_bytes


def copies(
    directory: Path, metrics: dict[str, dict], base_bytes: dict[str, float], base_size: int | None = None
) -> list[dict]:
    """One entry per SCHEME/quantization.json in `directory`: its facts, its size, its and the quantized base's
    metrics (`metrics`: the job's flat metrics by variant, output k's under "compressed" and "compressed+S");
    `base_bytes` the quantized bases' sizes by scheme, `base_size` the base's own."""
    found = []
    for qj in sorted(Path(directory).glob("*/quantization.json")):
        s = qj.parent.name
        found.append(
            {
                "scheme": s,
                "facts": json.loads(qj.read_text()),
                "bytes": weight_bytes(qj.parent),
                "nbl_bytes": weight_bytes(directory),
                "base_bytes": base_bytes.get(s),
                "base_size": base_size,
                "metrics": metrics.get(f"compressed+{s}") or {},
                "base_metrics": metrics.get(f"base+{s}") or {},
            }
        )
    return found


def _mb(x) -> str:
    return "—" if not x else f"{x / 1e6:,.1f}"


def _num(x) -> str:
    return "—" if x is None else f"{x:.4g}"


def quant_section(entries: list[dict], metrics: dict[str, dict]) -> str:
    lines = []
    for e in entries:
        f, s = e["facts"], e["scheme"]
        kept = ", ".join(f"`{m}`" for m in f.get("unquantized") or []) or "none"
        lines += [
            f"### {s}: folder `{s}/`, {e['bytes'] / 1e6:,.1f} MB (this output: {e['nbl_bytes'] / 1e6:,.1f} MB)\n",
            f"compressed-tensors {f.get('preset')} by llm-compressor {f.get('llmcompressor')} (compressed-tensors "
            f"{f.get('compressed_tensors')}), {f.get('method')}"
            + (f", groups of {f['group_size']}" if f.get("group_size") else "")
            + f", on {f.get('calibration_tokens', 0):,} calibration tokens; left unquantized: {kept}. "
            f"Runs in: {', '.join(SCHEMES[s].runs_in) if s in SCHEMES else '?'}; `vllm serve <this folder>/{s}`.\n",
        ]
        names = [
            *(PPL_METRIC.format(n) for n in _names(metrics, "perplexity/", "/ppl")),
            *(ACC_METRIC.format(n) for n in _names(metrics, "tasks/", "/acc")),
        ]
        if not names:
            continue
        rows = [
            ("base", metrics.get("base") or {}, e.get("base_size")),
            (f"base + {s}", e["base_metrics"], e.get("base_bytes")),
            ("NBL", metrics.get("compressed") or {}, e["nbl_bytes"]),
            (f"NBL + {s}", e["metrics"], e["bytes"]),
        ]
        heads = " | ".join(n.removesuffix("/ppl").removesuffix("/acc") for n in names)
        lines.append(f"\n| model | {heads} | weights MB |")
        lines.append("|---|" + "---|" * len(names) + "---:|")
        lines += [
            f"| {label} | " + " | ".join(_num(m.get(n)) for n in names) + f" | {_mb(size)} |" for label, m, size in rows
        ]
        lines.append("")
    return "\n".join(lines) + "\n"


def _names(metrics: dict[str, dict], head: str, tail: str) -> list[str]:
    flat = metrics.get("compressed") or {}
    return [k.removeprefix(head).removesuffix(tail) for k in flat if k.startswith(head) and k.endswith(tail)]
