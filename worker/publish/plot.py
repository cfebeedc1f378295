"""The model card's figure: every layer's score under the criterion that chose, replaced layers marked.

Drawn with matplotlib's object API on an Agg canvas (no pyplot, no display, no global backend
state), so it runs inside a headless worker and beside other threads.
"""

from __future__ import annotations

from pathlib import Path

from service.jobs.recipe import CRITERION, MODE
from service.jobs.score_fields import CRITERION_FIELD

LABELS = {"cca_bound": "CCA bound Σ(1 − ρ²)  (lower = more linear)", "nmse": "NMSE of the linear fit",
          "cosine": "cosine(h, h + y)  (higher = more skippable)", "loss_rise": "loss rise when replaced"}


def plot_series(report: dict) -> tuple[str, list[int], list[float], set[int]] | None:
    """(score field, layers, values, replaced layers) for the plot, or None when there is nothing to draw."""
    recipe = report.get("recipe") or {}
    mode = recipe.get("mode", MODE)
    score = CRITERION_FIELD.get(recipe.get("criterion", CRITERION), CRITERION_FIELD[CRITERION])
    points = [(s["layer"], (s.get(mode) or {}).get(score)) for s in report.get("layers") or []]
    points = [(i, float(v)) for i, v in points if v is not None]
    if not points:
        return None
    return score, [i for i, _ in points], [v for _, v in points], set(report.get("replaced_layers") or [])


def score_plot(report: dict, path: Path) -> Path | None:
    """Write the PNG to `path`; None (and no file) when the report holds no scores."""
    series = plot_series(report)
    if series is None:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    score, layers, values, chosen = series
    mode = (report.get("recipe") or {}).get("mode", "attn")
    fig = Figure(figsize=(max(6.0, 0.28 * len(layers) + 2), 3.4), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    colors = ["#d62728" if i in chosen else "#9ab3cf" for i in layers]
    ax.bar(layers, values, color=colors, width=0.8)
    ax.set_xlabel("decoder layer")
    ax.set_ylabel(LABELS.get(score, score), fontsize=8)
    ax.set_title(f"NBL per-layer scores ({mode} mode); replaced: {sorted(chosen)}", fontsize=9)
    ax.set_xticks(layers if len(layers) <= 40 else layers[::2])
    ax.tick_params(axis="x", labelsize=7)
    ax.legend(handles=[Patch(color="#d62728", label="replaced"), Patch(color="#9ab3cf", label="kept")],
              fontsize=8, loc="best")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, format="png", metadata={"Software": None})  # no version stamp: same scores, same bytes
    return path
