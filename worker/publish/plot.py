"""The model card's figure: every layer's score under the criterion that chose, replaced layers marked.

    ranked (cca, nmse, cosine, loss, or auto won by one)   the scores, and the cut: a dashed line between the
                                                           k-th and (k+1)-th ranked values
    greedy (or auto won by greedy)                         cca_bound with the chosen layers in red, and a second
                                                           panel: the selection perplexity after each greedy
                                                           step, cut at k (plot_selection.py)

Every score is drawn lower = more skippable, cosine as 1 − cosine on a log axis, a linear axis zoomed when
the scores sit far from 0: the dashboard's convention (nbl/selection/score_view.py). The series and the cut
below stay in the score's own terms; only the drawing converts.

Drawn with matplotlib's object API on an Agg canvas (no pyplot, no display, no global backend
state), so it runs inside a headless worker and beside other threads.
"""

from __future__ import annotations

import math
from pathlib import Path

from nbl.recipe import CRITERION, MODE
from nbl.selection.score_fields import CRITERION_FIELD, HIGHER_FIRST, MEASURED
from nbl.selection.score_view import axis_range, drawn, view

from .plot_selection import GREEDY, draw_greedy, greedy_panel

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


def drawing(report: dict, series: tuple[str, list[int], list[float], set[int]]) -> dict:
    """What the figure draws, in the dashboard's convention: {"label", "log", "heights" (per layer), "cut" (or
    None), "ylim", "floor" (where the bars stand)}."""
    score, _, values, _ = series
    shown = view(score)
    heights = [drawn(score, v) for v in values]
    cut = cut_value(report, series)
    cut = None if cut is None else drawn(score, cut)
    lo, hi = axis_range([*heights, *([] if cut is None else [cut])], log=shown.log)
    floor = lo if shown.log or lo > 0 else 0.0  # bars stand on the axis' bottom when it does not start at 0
    return {"label": shown.label, "log": shown.log, "heights": heights, "cut": cut, "ylim": (lo, hi), "floor": floor}


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
    d = drawing(report, series)
    colors = [REPLACED if i in chosen else KEPT for i in layers]
    ax.bar(layers, [h - d["floor"] for h in d["heights"]], bottom=d["floor"], color=colors, width=0.8)
    if d["log"]:
        ax.set_yscale("log")
    ax.set_ylim(*d["ylim"])
    ax.set_xlabel("decoder layer")
    ax.set_ylabel(d["label"], fontsize=8)
    ax.set_title(f"NBL per-layer scores ({mode} mode, chosen by {by}); replaced: {sorted(chosen)}", fontsize=9)
    ax.set_xticks(layers if len(layers) <= 40 else layers[::2])
    ax.tick_params(axis="x", labelsize=7)
    handles = [Patch(color=REPLACED, label="replaced"), Patch(color=KEPT, label="kept")]
    if d["cut"] is not None:
        ax.axhline(d["cut"], color="black", linestyle="--", linewidth=1)
        handles.append(Line2D([], [], color="black", linestyle="--", linewidth=1, label=f"cut (k={len(chosen)})"))
    ax.legend(handles=handles, fontsize=8, loc="best")
    if panel:
        draw_greedy(fig.add_subplot(2, 1, 2), panel)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, format="png", metadata={"Software": None})  # no version stamp: same scores, same bytes
    return path
