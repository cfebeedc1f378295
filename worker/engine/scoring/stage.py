"""Scores and LMMSE maps from each layer's sums, held in memory or read one shard at a time from a
statistics cache entry, so no step holds every layer's sums."""

from __future__ import annotations

from typing import Callable

from tqdm.auto import tqdm

from worker.engine.calibration.stats import LayerStats
from worker.engine.calibration.stats_cache import Shards
from worker.engine.scoring.form_scores import score_form_layer
from worker.engine.scoring.scores import DEFAULT_RIDGE, LinearMap, layer_moments, lmmse, score_layer


def layer_scores(i: int, stats: LayerStats, ridge: float = DEFAULT_RIDGE, form: str = "nbl") -> dict:
    """One layer's scores for the modes its sums hold, as a plain dict (the report's and the JSON's shape);
    a form other than nbl: on that form's own fit (form_scores.py)."""
    if form != "nbl":
        return score_form_layer(i, stats, form, stats.branches[0], ridge)
    return {"layer": i, **{b: sc.as_dict() for b, sc in score_layer(stats, ridge).items()}}


def layer_reader(stats: list[LayerStats] | Shards):
    """(count, get) over a list of sums in memory or a cache entry read one shard at a time."""
    if isinstance(stats, Shards):
        return stats.num_layers, stats.layer
    return len(stats), stats.__getitem__


def score_stage(
    stats: list[LayerStats] | Shards,
    ridge: float = DEFAULT_RIDGE,
    progress: bool = False,
    on_layer: Callable[[int, int], None] | None = None,
    form: str = "nbl",
) -> list[dict]:
    """Every layer's scores, reading one layer's sums at a time. `on_layer(done, total)` after each layer
    (about a second each on SmolLM2 on a CPU; it may raise to cancel)."""
    n, get = layer_reader(stats)
    out = []
    for i in tqdm(range(n), desc="score", unit="layer", disable=not progress):
        out.append(layer_scores(i, get(i), ridge, form))
        if on_layer is not None:
            on_layer(i + 1, n)
    return out


def fit_maps(
    stats: list[LayerStats] | Shards, mode: str, layers, ridge: float = DEFAULT_RIDGE, split=None
) -> dict[int, LinearMap]:
    """LMMSE maps of the given layers only: a cache entry reads only their shards."""
    _, get = layer_reader(stats)
    return {i: lmmse(layer_moments(get(i), mode, split), ridge) for i in layers}
