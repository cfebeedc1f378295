"""One convention for a score on the card's figure and the dashboard (issue 38): lower = more skippable,
cosine as 1 − cosine on a log axis, a linear axis zoomed when all bars would look alike from 0."""

from __future__ import annotations

import pytest

from nbl.selection.score_view import TINY, axis_range, drawn, view


def test_every_score_reads_lower_is_more_skippable():
    for field in ("cca_bound", "nmse", "cosine", "loss_rise"):
        assert "lower = more" in view(field).label
    assert drawn("cosine", 0.998) == pytest.approx(0.002) and drawn("cosine", 1.0) == TINY
    assert drawn("cca_bound", 380.0) == 380.0 and view("cosine").log and not view("cca_bound").log


def test_a_flat_block_mode_cca_chart_is_zoomed_so_differences_show():
    values = [380.0, 391.0, 408.0]
    lo, hi = axis_range(values)
    assert 370 < lo < 380 and 408 < hi < 420
    assert (408 - lo) / (380 - lo) > 5  # the highest bar over 5x the lowest, not 1.07x


def test_scores_spread_from_near_zero_start_at_zero():
    assert axis_range([0.1, 0.4, 3.2]) == (0.0, 3.2)
    assert axis_range([-0.5, 2.0]) == (-0.5, 2.0)  # a loss rise below 0 hangs below the axis
    assert axis_range([0.0, 0.0]) == (0.0, 1.0)


def test_a_log_axis_spans_whole_decades():
    assert axis_range([0.002, 0.05], log=True) == pytest.approx((1e-3, 1e-1))
    assert axis_range([0.01, 0.01], log=True) == pytest.approx((1e-3, 1e-2))
    assert axis_range([0.1, 0.3], log=True)[0] < 0.1  # the lowest score still draws a bar
