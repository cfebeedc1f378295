"""What a run should warn about: results that look fine but rest on too little data. Pure functions of
the run's own numbers; the pipeline sends each as a `warning` event (printed by `nbl wait` and `nbl
compress`) and the model card lists them.

- Held-out NMSE above 1 on a replaced layer: the linear map predicts the held-out calibration blocks
  worse than their mean would, i.e. it over-fits the blocks it was fitted on (this project measured
  SmolLM2 going from perplexity 13.8 to 236 that way on 1,024 calibration tokens). More tokens help.
- Fewer calibration tokens than 10·d (d the hidden size): each map has d + 1 coefficients per output
  dimension, so fewer than ten samples per coefficient.
- An evaluation cut short by `max_tokens` or `limit`: its numbers are of a sample; the warning, the
  card and the model-index say how many tokens or documents were scored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .eval.truncation import describe, scored

TOKENS_PER_DIM = 10


@dataclass
class RunWarnings:
    common: list[str] = field(default_factory=list)  # about every output
    by_k: dict[int, list[str]] = field(default_factory=dict)  # about one output
    scored: dict[str, dict] = field(default_factory=dict)  # the evaluations cut short (eval/truncation.py)

    def for_k(self, k: int) -> list[str]:
        return self.by_k.get(k, []) + self.common


def overfit(scores: list[dict], mode: str, selected: dict[int, list[int]]) -> dict[int, str]:
    """k -> a warning naming the replaced layers whose held-out NMSE exceeds 1."""
    held = {s["layer"]: (s.get(mode) or {}).get("heldout_nmse") for s in scores}
    out = {}
    for k, layers in selected.items():
        bad = [(i, held[i]) for i in layers if held.get(i) is not None and held[i] > 1]
        if bad:
            out[k] = (
                f"k={k}: held-out NMSE above 1 on replaced layer{'s' if len(bad) > 1 else ''} "
                + ", ".join(f"{i} ({v:.3g})" for i, v in bad)
                + ": the linear map over-fits its calibration blocks; calibrate on more tokens"
            )
    return out


def few_tokens(tokens: int | None, hidden_size: int | None) -> str | None:
    """A warning when the calibration had fewer than 10·d tokens."""
    if not tokens or not hidden_size or tokens >= TOKENS_PER_DIM * hidden_size:
        return None
    return (
        f"calibration on {tokens:,} tokens, fewer than {TOKENS_PER_DIM}·d = {TOKENS_PER_DIM * hidden_size:,} "
        f"(hidden size d = {hidden_size:,}): the maps have d + 1 coefficients per output; calibrate on more "
        "tokens (num_samples × seq_len)"
    )


def truncated(cut: dict[str, dict]) -> str | None:
    """One warning for every evaluation cut short (worker/eval/truncation.py), or None."""
    if not cut:
        return None
    return "evaluation truncated, its numbers are of a sample: " + "; ".join(describe(s, i) for s, i in cut.items())


def hidden_size(lm) -> int | None:
    """d of a LoadedModel: its config in memory, else its config.json (loaded without weights, the model
    is None until something needs them); None when neither says."""
    if getattr(lm, "model", None) is not None:
        return getattr(lm.model.config, "hidden_size", None)
    try:
        cfg = json.loads((Path(lm.path) / "config.json").read_text())
    except (OSError, TypeError, ValueError):
        return None
    return cfg.get("hidden_size") or (cfg.get("text_config") or {}).get("hidden_size")


def text_part(lm) -> str | None:
    """A multimodal model's job compresses and publishes its text model alone: said on every card."""
    if lm.text_part_of is None:
        return None
    return (
        f"the input is a multimodal {lm.text_part_of} model: this output is its text model alone "
        f"({lm.family}), without the vision tower and the projector"
    )


def after_compression(
    scores: list[dict],
    mode: str,
    selected: dict[int, list[int]],
    tokens: int | None,
    hidden_size: int | None,
    warn=None,
) -> RunWarnings:
    """The calibration's warnings, each also sent to `warn` (a sink's warning) when given."""
    w = RunWarnings(by_k={k: [msg] for k, msg in overfit(scores, mode, selected).items()})
    if (msg := few_tokens(tokens, hidden_size)) is not None:
        w.common.append(msg)
    for msg in [*w.common, *(m for ms in w.by_k.values() for m in ms)] if warn else ():
        warn(msg)
    return w


def after_evaluation(
    w: RunWarnings, metrics: dict[str, dict], limit: int | None, max_tokens: int | None, warn=None
) -> list[str]:
    """Adds the evaluation's warning to `w` (and sends it to `warn`); returns the new warnings."""
    w.scored = scored(metrics, limit, max_tokens)
    msg = truncated(w.scored)
    if msg is None:
        return []
    w.common.append(msg)
    if warn:
        warn(msg)
    return [msg]
