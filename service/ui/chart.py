"""The per-layer score chart as inline SVG: one bar per layer, the job's selected layers filled, and
for each k a dashed line where this criterion's ranking would cut (between its k-th and (k+1)-th
layer). Pure: data in, markup out; every text is escaped here, since the template inserts it raw.

Drawn as SVG (not a PNG, not JavaScript) so the page stays one server-rendered document that works
offline and under a CSP with no scripts.
"""

from __future__ import annotations

import math
from html import escape

from nbl.selection.score_fields import CRITERION_FIELD, HIGHER_FIRST
from nbl.selection.score_view import TINY, axis_range, drawn, view

# One convention with the model card's figure (nbl/selection/score_view.py): lower = more skippable for every
# score, cosine drawn as 1 − cosine on a log axis, a linear axis zoomed when the scores sit far from 0.
CRITERIA = {c: (f, c in HIGHER_FIRST) for c, f in CRITERION_FIELD.items()}  # criterion -> (field, higher first)

WIDTH, HEIGHT = 720, 220
SCALE_LOG = ' data-scale="log"'
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 22, 30  # plot margins: y labels left, layer numbers below


def fmt(x: float) -> str:
    """A score for a label: 4 significant digits, no exponent for ordinary magnitudes."""
    return f"{x:.4g}" if x == 0 or 1e-3 <= abs(x) < 1e5 else f"{x:.2e}"


def cuts(values: dict[int, float], ks: list[int], higher_first: bool) -> dict[int, float]:
    """k -> the score between the k-th and (k+1)-th ranked layer; no cut for k >= the layers scored."""
    ranked = sorted(values.values(), reverse=higher_first)
    return {k: (ranked[k - 1] + ranked[k]) / 2 for k in sorted(set(ks)) if 0 < k < len(ranked)}


def series(layers: list[dict], mode: str, field: str) -> dict[int, float]:
    """layer -> score for one mode and field, from /layers rows ({"layer", "attn": {...}, "block": {...}})."""
    out = {}
    for row in layers:
        v = (row.get(mode) or {}).get(field)
        if v is not None:
            out[int(row["layer"])] = float(v)
    return out


def score_chart(
    values: dict[int, float],
    selected: set[int],
    ks: list[int],
    field: str,
    higher_first: bool,
    title: str,
    log: bool = False,
) -> str:
    """The SVG element (a string); empty when there is nothing to draw. `log`: a log10 y axis for
    positive values spread over decades (1 − cosine: 0.002 and 0.05 both read as "0.99" on a linear one);
    its bars stand on the axis' bottom."""
    if not values:
        return ""
    layers = sorted(values)
    lines = cuts(values, ks, higher_first)
    lo, hi = axis_range([*values.values(), *lines.values()], log=log)
    if log:
        values = {i: math.log10(max(v, TINY)) for i, v in values.items()}
        lines = {k: math.log10(max(v, TINY)) for k, v in lines.items()}
        lo, hi = math.log10(lo), math.log10(hi)
    shown = (lambda v: 10**v) if log else (lambda v: v)
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = pw / len(layers)

    def y(v: float) -> float:
        return TOP + (hi - v) / (hi - lo) * ph

    out = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{escape(title)}" data-field="{escape(field)}"'
        f' data-axis-from="{fmt(shown(lo))}"{SCALE_LOG if log else ""}>',
        f"<title>{escape(title)}</title>",
        f'<text class="chart-title" x="{LEFT}" y="14">{escape(title)}</text>',
    ]
    for v in (lo, (lo + hi) / 2, hi):  # three y ticks
        out.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}"/>')
        out.append(f'<text class="tick" x="{LEFT - 4}" y="{y(v) + 3:.1f}" text-anchor="end">{fmt(shown(v))}</text>')
    zero = y(lo if log or lo > 0 else 0.0)  # bars stand on the axis' bottom when it does not start at 0
    step = max(1, len(layers) // 32)  # at most ~32 layer numbers under the axis
    for n, layer in enumerate(layers):
        v = values[layer]
        x = LEFT + n * slot + slot * 0.1
        top, bottom = sorted((y(v), zero))
        cls = "bar selected" if layer in selected else "bar"
        label = f"layer {layer}: {fmt(shown(v))}" + (" (selected)" if layer in selected else "")
        out.append(
            f'<rect class="{cls}" data-layer="{layer}" x="{x:.1f}" y="{top:.1f}" width="{slot * 0.8:.1f}" '
            f'height="{max(bottom - top, 0.5):.1f}"><title>{escape(label)}</title></rect>'
        )
        if n % step == 0:
            out.append(
                f'<text class="tick" x="{x + slot * 0.4:.1f}" y="{HEIGHT - BOTTOM + 12}" '
                f'text-anchor="middle">{layer}</text>'
            )
    out.append(f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{zero:.1f}" y2="{zero:.1f}"/>')
    for n, (k, v) in enumerate(lines.items()):  # labels step left, so close cuts stay readable
        out.append(
            f'<line class="cut" data-k="{k}" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}">'
            f"<title>cut for k={k}: {fmt(shown(v))}</title></line>"
        )
        out.append(
            f'<text class="cut-label" x="{WIDTH - RIGHT - 2 - 36 * n}" y="{y(v) - 3:.1f}" text-anchor="end">k={k}</text>'
        )
    out.append(f'<text class="tick" x="{LEFT + pw / 2:.1f}" y="{HEIGHT - 4}" text-anchor="middle">layer</text>')
    out.append("</svg>")
    return "".join(out)


def job_charts(layers: list[dict], selected_layers: list[dict] | None, spec: dict) -> list[dict]:
    """One chart per (mode, criterion) that has scores: [{"mode", "criterion", "field", "chosen", "svg"}].
    The job's own mode comes first and its own criterion is flagged `chosen` (the one that selected)."""
    comp = spec.get("compression") or {}
    job_mode, job_criterion = comp.get("mode", "attn"), comp.get("criterion", "cca")
    charts = []
    for mode in sorted({"attn", "block"}, key=lambda m: m != job_mode):
        outputs = [s for s in selected_layers or [] if s.get("mode", job_mode) == mode]
        selected = {int(i) for s in outputs for i in s.get("layers") or []}
        ks = [int(s["k"]) for s in outputs if s.get("k") is not None]
        for criterion, (field, higher_first) in CRITERIA.items():
            values = series(layers, mode, field)
            if not values:
                continue
            v = view(field)  # cosine drawn as 1 − cosine: lower = more skippable, the same ranking
            values, higher_first = {i: drawn(field, x) for i, x in values.items()}, higher_first != v.flip
            chosen = mode == job_mode and criterion == job_criterion
            title = f"{mode} · {criterion}: {v.label}"
            charts.append(
                {
                    "mode": mode,
                    "criterion": criterion,
                    "field": field,
                    "chosen": chosen,
                    "svg": score_chart(values, selected, ks, field, higher_first, title, log=v.log),
                }
            )
    return charts
