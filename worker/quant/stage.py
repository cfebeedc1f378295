"""The pipeline's quantize stage (publish.quantize, issue 39): each output written once more per scheme, into its
own SCHEME/ folder (published with the output, listed in its manifest), and, when the job evaluates, the base
quantized alike (into a directory the pipeline removes after the evaluation, never published) so that the evaluation can give base, base + scheme,
NBL and NBL + scheme side by side.

Runs after the load check (the base has left memory: llm-compressor loads each checkpoint in its own process)
and before the evaluation, so a gate can hold a quantized output to its own bounds (gates.quantized). GPTQ
calibrates on the job's own calibration blocks, cut once (the outputs share the base's tokenizer).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nbl.outputs.quant_schemes import SCHEMES
from nbl.recipe import Recipe

from ..engine.placement import weight_bytes
from .blocks import gptq_blocks
from .quantize import quant_python, quantize


@dataclass
class Quantized:
    outputs: dict[int, dict[str, dict]] = field(default_factory=dict)  # k -> scheme -> what quantize() did
    base: dict[str, dict] = field(default_factory=dict)  # scheme -> the base's, when the job evaluates
    base_bytes: int | None = None  # the unquantized base's weights on disk, beside its copies on the card

    def variants(self) -> dict[str, Path]:
        """What the evaluation measures besides the base and the outputs: "k4+w4a16", "base+w4a16"."""
        found = {f"k{k}+{s}": Path(f["path"]) for k, by in self.outputs.items() for s, f in by.items()}
        return found | {f"base+{s}": Path(f["path"]) for s, f in self.base.items()}

    def facts(self) -> dict[str, float]:
        """The stored flat variant (nbl/quant_result.py reads it): k4/w4a16/bytes, base/w4a16/calibration_tokens."""
        rows = {f"k{k}": by for k, by in self.outputs.items()} | ({"base": self.base} if self.base else {})
        return {
            f"{who}/{s}/{key}": float(f[key])
            for who, by in rows.items()
            for s, f in by.items()
            for key in ("bytes", "calibration_tokens")
            if f.get(key) is not None
        }


def schemes_of(recipe: Recipe) -> tuple[str, ...]:
    return recipe.publishing.quantize if recipe.publishing is not None else ()


def ready(recipe: Recipe, python: Path | None) -> None:
    """Before calibrating: a worker without the quantization venv fails the job now, not after an hour."""
    if schemes_of(recipe):
        quant_python(python)


def run(
    recipe: Recipe,
    outputs: dict[int, Path],
    base: tuple[Path, Path] | None,
    sink,
    python: Path | None = None,
    data_dir: Path | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> Quantized:
    """Quantize every output (into OUTPUT/SCHEME) and, given `base` (its directory, where its copies go), the base
    (into THERE/SCHEME)."""
    schemes, done = schemes_of(recipe), Quantized()
    todo = [(k, path, path / s, s) for k, path in outputs.items() for s in schemes]
    if base is not None:
        todo += [(None, base[0], base[1] / s, s) for s in schemes]
        done.base_bytes = weight_bytes(base[0]) or None
    blocks = None
    if any(SCHEMES[s].gptq for s in schemes) and outputs:
        sink.progress("quantize", 0.0, "cutting the calibration blocks GPTQ fits on")
        blocks = gptq_blocks(recipe, next(iter(outputs.values())), data_dir)
    for j, (k, src, dst, s) in enumerate(todo):
        who = "the base" if k is None else f"k={k}"
        sink.progress("quantize", j / len(todo), f"{who}: {s}")
        dst.parent.mkdir(parents=True, exist_ok=True)
        facts = quantize(src, dst, s, blocks, python=python, should_stop=should_stop)
        if k is None:
            done.base[s] = facts
        else:
            done.outputs.setdefault(k, {})[s] = facts
        sink.progress("quantize", (j + 1) / len(todo), f"{who}: {s}, {facts['bytes'] / 1e6:,.1f} MB")
    return done
