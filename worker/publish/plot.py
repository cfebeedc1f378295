"""The model card's figure: every layer's score under the criterion that chose, replaced layers marked.

    ranked (cca, nmse, cosine, loss, or auto won by one)   the scores, and the cut: a dashed line between the
                                                           k-th and (k+1)-th ranked values
    greedy (or auto won by greedy)                         cca_bound with the chosen layers in red, and a second
                                                           panel: the selection perplexity after each greedy
                                                           step, cut at k (plot_selection.py)

Drawn with matplotlib's object API on an Agg canvas (no pyplot, no display, no global backend
state), so it runs inside a headless worker and beside other threads.
"""

from __future__ import annotations

import math
from pathlib import Path

from nbl.recipe import CRITERION, MODE
from nbl.selection.score_fields import CRITERION_FIELD, HIGHER_FIRST, MEASURED

from .plot_selection import GREEDY, draw_greedy, greedy_panel

LABELS = {
    "cca_bound": "CCA bound Σ(1 − ρ²)  (lower = more linear)",
    "nmse": "NMSE of the linear fit",
    "cosine": "cosine(h, h + y)  (higher = more skippable)",
    "loss_rise": "loss rise when replaced",
}
REPLACED, KEPT = "#d62728", "#9ab3cf"


def chosen_by(report: dict) -> str:
    """The criterion that chose this output's layers: the recipe's, or for auto the one that won at its k
    (the selection record's `chosen`); auto without a record stays auto."""
    criterion = (report.get("recipe") or {}).get("criterion", CRITERION)
    if criterion not in MEASURED:
        return criterion
    k = len(report.get("replaced_layers") or [])
    won = next((c for c in (report.get("selection") or {}).get("chosen") or [] if c.get("k") == k), None)
    return won["criterion"] if won else criterion


def plot_series(report: dict) -> tuple[str, list[int], list[float], set[int]] | None:
    """(score field, layers, values, replaced layers) for the plot, or None when there is nothing to draw.
    The field is the deciding criterion's; greedy (and an unresolved auto) show the CCA bound."""
    mode = (report.get("recipe") or {}).get("mode", MODE)
    # a set measured as a whole has no per-layer score of its own: the paper's bound, whatever the default is
    score = CRITERION_FIELD.get(chosen_by(report), CRITERION_FIELD["cca"])
    points = [(s["layer"], (s.get(mode) or {}).get(score)) for s in report.get("layers") or []]
    points = [(i, float(v)) for i, v in points if v is not None]
    if not points:
        return None
    return score, [i for i, _ in points], [v for _, v in points], set(report.get("replaced_layers") or [])


def cut_value(report: dict, series: tuple[str, list[int], list[float], set[int]] | None = None) -> float | None:
    """The threshold a ranked criterion cut at: midway between the k-th and (k+1)-th ranked values (ranked as
    worker/engine/selection/criteria.py does: the criterion's direction, NaN last, ties by layer). None when nothing
    was cut by a ranking: greedy, k = 0 or every layer, a NaN at the cut, or replaced layers that are not the
    ranking's first k (nothing honest to draw)."""
    criterion = chosen_by(report)
    series = plot_series(report) if series is None else series
    if criterion not in CRITERION_FIELD or series is None:
        return None
    _, layers, values, chosen = series
    k = len(chosen)
    if not 0 < k < len(layers):
        return None
    sign = -1.0 if criterion in HIGHER_FIRST else 1.0
    order = sorted(zip(layers, values), key=lambda p: (math.isnan(p[1]), sign * p[1], p[0]))
    if {i for i, _ in order[:k]} != chosen:
        return None
    cut = (order[k - 1][1] + order[k][1]) / 2
    return cut if math.isfinite(cut) else None


def score_plot(report: dict, path: Path) -> Path | None:
    """Write the PNG to `path`; None (and no file) when the report holds no scores."""
    series = plot_series(report)
    if series is None:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    score, layers, values, chosen = series
    mode = (report.get("recipe") or {}).get("mode", MODE)
    criterion = chosen_by(report)
    asked = (report.get("recipe") or {}).get("criterion", CRITERION)
    by = criterion if asked == criterion else f"{asked} → {criterion}"
    panel = greedy_panel(report) if criterion == GREEDY else None
    fig = Figure(figsize=(max(6.0, 0.28 * len(layers) + 2), 6.6 if panel else 3.4), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(2, 1, 1) if panel else fig.add_subplot()
    ax.bar(layers, values, color=[REPLACED if i in chosen else KEPT for i in layers], width=0.8)
    ax.set_xlabel("decoder layer")
    ax.set_ylabel(LABELS.get(score, score), fontsize=8)
    ax.set_title(f"NBL per-layer scores ({mode} mode, chosen by {by}); replaced: {sorted(chosen)}", fontsize=9)
    ax.set_xticks(layers if len(layers) <= 40 else layers[::2])
    ax.tick_params(axis="x", labelsize=7)
    handles = [Patch(color=REPLACED, label="replaced"), Patch(color=KEPT, label="kept")]
    cut = cut_value(report, series)
    if cut is not None:
        ax.axhline(cut, color="black", linestyle="--", linewidth=1)
        handles.append(Line2D([], [], color="black", linestyle="--", linewidth=1, label=f"cut (k={len(chosen)})"))
    ax.legend(handles=handles, fontsize=8, loc="best")
    if panel:
        draw_greedy(fig.add_subplot(2, 1, 2), panel)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, format="png", metadata={"Software": None})  # no version stamp: same scores, same bytes
    return path
