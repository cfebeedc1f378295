"""How a per-layer score is drawn: one convention for the model card's figure (worker/publish/plot.py) and the
dashboard's chart (service/ui/chart.py), so the same score never reads two ways.

Lower = more skippable, for every score. The CCA bound, NMSE and loss rise are already so; cosine(h, h + y)
is drawn as 1 − cosine, on a log axis: a near-identity layer's 0.998 and a real layer's 0.95 both read
"~1" on a linear one, while 0.002 and 0.05 are a decade and more apart. (The card plotted cosine on a
linear 0–1 axis, "higher = more skippable", beside the dashboard's 1 − cosine: issue 38.)

A linear axis starts at 0 unless the scores sit far from it: the block-mode CCA bound of a 30-layer model
spans 380–408, and bars from 0 all look the same height. Then the axis starts just below the lowest
score (`axis_range`), and its first tick says where. Torch-free, pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

TINY = 1e-9  # 1 − cosine of an identity-like layer can be 0 (or a rounding below): the log axis' floor
ZOOM_BELOW = 0.25  # start above 0 when the scores' spread is under this fraction of the largest
MARGIN = 0.15  # of the spread, below the lowest score (or cut) on a zoomed axis


@dataclass(frozen=True)
class ScoreView:
    label: str  # the axis' label: what is drawn and which way is skippable
    flip: bool = False  # drawn as 1 − value
    log: bool = False  # a log10 axis


VIEWS = {
    "cca_bound": ScoreView("CCA bound Σ(1 − ρ²), lower = more linear"),
    "nmse": ScoreView("NMSE of the linear fit, lower = more linear"),
    "heldout_nmse": ScoreView("held-out NMSE, lower = more linear"),
    "cosine": ScoreView("1 − cosine(h, h + y), log axis, lower = more skippable", flip=True, log=True),
    "loss_rise": ScoreView("loss rise when replaced, lower = more skippable"),
}


def view(field: str) -> ScoreView:
    return VIEWS.get(field, ScoreView(field))


def drawn(field: str, value: float) -> float:
    """The value as plotted: 1 − cosine (floored at TINY, for the log axis), any other score as it is."""
    v = view(field)
    x = 1.0 - value if v.flip else value
    return max(x, TINY) if v.log else x


def axis_range(values: list[float], log: bool = False) -> tuple[float, float]:
    """(lo, hi) of the y axis for these drawn values (cuts included). Log: whole decades around them.
    Linear: from min(0, lowest), or just below the lowest when the spread is under ZOOM_BELOW of the
    largest (all bars would look alike from 0)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return (0.0, 1.0)
    lo, hi = min(finite), max(finite)
    if log:
        # a twentieth of a decade below the lowest: a score of exactly 0.1 is a bar, not the axis' floor
        lo, hi = math.floor(math.log10(max(lo, TINY)) - 0.05), math.ceil(math.log10(max(hi, TINY)))
        return (10.0**lo, 10.0 ** (hi if hi > lo else lo + 1))
    if lo > 0 and hi - lo < ZOOM_BELOW * hi:
        spread = hi - lo or 0.1 * hi
        return (lo - MARGIN * spread, hi + MARGIN * spread)
    lo, hi = min(0.0, lo), max(0.0, hi)
    return (lo, hi if hi > lo else lo + 1.0)
