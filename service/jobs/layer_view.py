"""GET /v1/jobs/{id}/layers: each layer's scores in both modes, and for each output of the job
whether the layer was replaced there and its rank by the job's criterion.

The rank is the engine's order (worker/engine/selection/criteria.py ranking): by the criterion's score field,
lowest first (cosine: highest first), a missing score (NaN, stored as null) last, ties by layer index;
rank 1 is the layer replaced first, so an output with k layers replaces ranks 1..k.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from sqlalchemy import select
from sqlalchemy.orm import Session

from nbl import recipe as R
from nbl.selection.score_fields import CRITERION_FIELD, HIGHER_FIRST
from service.core.models import Job, LayerScore
from service.jobs.responses import LayerList, LayerMark, LayerModeScores, LayerScoresOut


def ranks(values: Mapping[int, float | None], criterion: str) -> dict[int, int]:
    """{layer: rank (1 = replaced first)} from {layer: the criterion's score}."""
    sign = -1.0 if criterion in HIGHER_FIRST else 1.0
    order = sorted(values, key=lambda i: (values[i] is None, sign * (values[i] or 0.0), i))
    return {layer: r for r, layer in enumerate(order, start=1)}


def layer_list(session: Session, job: Job) -> LayerList:
    by_layer: dict[int, dict] = defaultdict(dict)
    for row in session.scalars(
        select(LayerScore).where(LayerScore.job_id == job.id).order_by(LayerScore.layer, LayerScore.mode)
    ):
        by_layer[row.layer][row.mode] = LayerModeScores.model_validate(row)
    comp = job.spec.get("compression") or {}
    criterion = comp.get("criterion") or R.CRITERION
    field = CRITERION_FIELD.get(criterion)
    marks: dict[int, list[LayerMark]] = defaultdict(list)
    for sel in job.selected_layers or []:
        mode = sel.get("mode") or comp.get("mode") or R.MODE
        rank = {}  # a measured criterion (greedy, auto) ranks sets, not layers: no rank
        if field:
            rank = ranks(
                {i: getattr(modes[mode], field) for i, modes in by_layer.items() if modes.get(mode) is not None},
                criterion,
            )
        chosen = set(sel.get("layers") or [])
        for i in by_layer:
            marks[i].append(
                LayerMark(k=sel["k"], mode=mode, selected=i in chosen, rank=rank.get(i), criterion=sel.get("criterion"))
            )
    return LayerList(data=[LayerScoresOut(layer=i, outputs=marks[i], **modes) for i, modes in sorted(by_layer.items())])
