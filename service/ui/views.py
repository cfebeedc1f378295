"""What the pages show, computed from the API's own job resources (JobOut, EventOut, layer rows):
recipe summaries, ages, the stage timeline, the result table with deltas, and the compare rows.
Pure functions, no database and no HTML: the templates escape whatever these return."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from nbl import job_label
from nbl.sizing.stage_plan import STAGES

from . import metrics

TERMINAL = ("succeeded", "failed", "cancelled")
_K_VARIANT = re.compile(r"k(\d+)")


def num(x: Any) -> str:
    """A metric for a table: readable digits, never 1.062e+08 for an ordinary count."""
    if x is None:
        return "—"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if not math.isfinite(x):
        return "—"
    if x == int(x) and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:,.1f}" if abs(x) >= 1000 else f"{x:.4g}"


def signed(x: float | None, percent: bool = False) -> str:
    if x is None:
        return ""
    return f"{x * 100:+.1f}%" if percent else ("+" if x > 0 else "") + num(x)


def recipe(spec: dict, metadata: dict | None = None) -> dict:
    """A job's recipe in words (model, mode, method, form, k, criterion; defaults as the worker fills them),
    its one-line summary and its label (nbl/job_label.py: shared with the `nbl` client)."""
    w = job_label.words(spec)
    return {**w, "summary": job_label.summary(w), "label": job_label.label(spec, metadata)}


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 10:
        return f"{max(seconds, 0):.1f}s"  # short stages (a cached calibration) are not all "0s"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def age(created: datetime, now: datetime) -> str:
    return duration((now - created).total_seconds())


def timeline(events: list, job, now: datetime) -> list[dict]:
    """The job's stages in order, from its `stage` events: [{"stage", "start", "seconds", "fraction",
    "progress", "current", "done"}]; a stage ends where the next begins, or when the job finished."""
    starts = [(e.created_at, e.stage or e.message or "?") for e in events if e.kind == "stage"]
    last_progress: dict[str, float] = {}
    for e in events:  # the stage's own fraction (events before migration 0008 have the job's only)
        fraction = e.stage_progress if getattr(e, "stage_progress", None) is not None else e.progress
        if e.stage and fraction is not None:
            last_progress[e.stage] = fraction
    end = job.finished_at or now
    spans = []
    for i, (start, stage) in enumerate(starts):
        stop = starts[i + 1][0] if i + 1 < len(starts) else end
        last = i + 1 == len(starts)
        current = last and job.status not in TERMINAL
        done = not last or job.status == "succeeded"  # a later stage began, or the job finished well
        here = job.progress if getattr(job, "stage_progress", None) is None else job.stage_progress
        progress = here if current else None if done else last_progress.get(stage)
        spans.append(
            {
                "stage": stage,
                "start": start,
                "seconds": max((stop - start).total_seconds(), 0.0),
                "progress": progress,
                "current": current,
                "done": done,
            }
        )
    total = sum(s["seconds"] for s in spans) or 1.0
    for s in spans:
        s["fraction"] = s["seconds"] / total
    return spans


def variant_order(name: str) -> tuple:
    """base first, then k4, k8, ... by k, each followed by its quantized copies ("k4+w4a16"), then anything else."""
    who, _, scheme = name.partition("+")
    m = _K_VARIANT.fullmatch(who)
    return (0, 0, scheme, name) if who == "base" else (1, int(m.group(1)), scheme, name) if m else (2, 0, "", name)


def _figures(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """The leaves of nested metrics by path ("perplexity/wikitext2/ppl"), in the result's order. Text
    (a speed run's device) is no figure of a table; None is kept: not measured."""
    if isinstance(node, Mapping):
        for k, v in node.items():
            yield from _figures(v, f"{prefix}/{k}" if prefix else str(k))
    elif node is None or (isinstance(node, (int, float)) and not isinstance(node, bool)):
        yield prefix, node


def _plain_result(result: Any) -> dict:
    """The job's typed `result` (JobResult, or its JSON) as a dict; {} when there is none."""
    if result is None:
        return {}
    return result if isinstance(result, Mapping) else result.model_dump(mode="json")


def result_variants(result: Any) -> dict[str, dict[str, dict]]:
    """The typed result by row: {"base": {"metrics": {...}}, "k4": {"metrics", "delta", "relative"}}, each
    a flat {path: value}; outputs not measured yet are left out."""
    result = _plain_result(result)
    out = {"base": {"metrics": dict(_figures(result["base"]))}} if result.get("base") else {}
    parts = ("metrics", "delta", "relative")
    rows = [("base", q) for q in result.get("base_quantized") or []]  # publish.quantize's copies, beside their model
    for o in result.get("outputs") or []:
        if o.get("metrics"):
            out[f"k{o['k']}"] = {part: dict(_figures(o.get(part))) for part in parts}
        rows += [(f"k{o['k']}", q) for q in o.get("quantized") or []]
    for who, q in rows:
        if q.get("metrics"):
            out[f"{who}+{q['scheme']}"] = {part: dict(_figures(q.get(part))) for part in parts}
    return out


def result_table(result: Any) -> dict:
    """The job's typed `result` as rows: the base, then each output with its value, its delta from the base
    and the relative change (the result's own), each metric under its name and unit (metrics.py), only the
    base and the outputs (the calibration's figures are no row). {"columns": [Metric], "rows": [{"variant",
    "cells": [...]}]}"""
    variants = result_variants(result)
    seen = dict.fromkeys(n for v in variants.values() for n, x in v["metrics"].items())
    columns = [
        metrics.describe(n)
        for n in seen
        if metrics.describe(n).shown and any(v["metrics"].get(n) is not None for v in variants.values())
    ]
    rows = []
    for name, v in sorted(variants.items(), key=lambda nv: variant_order(nv[0])):
        cells = []
        for col in columns:
            delta, rel = (v.get("delta") or {}).get(col.path), (v.get("relative") or {}).get(col.path)
            cells.append(
                {
                    "value": metrics.value(col, v["metrics"].get(col.path)),
                    "delta": metrics.delta(col, delta),
                    "relative": signed(rel, True),
                    "judge": metrics.judge(col, delta),
                }
            )
        rows.append({"variant": name, "cells": cells})
    return {"columns": columns, "rows": rows}


STAGE_COLOURS = STAGES  # every stage a job reports (nbl/sizing/stage_plan.py), each its colour in ui.css


def stage_class(stage: str) -> str:
    """Each stage its own colour (ui.css), the same on every page; an unknown one a neutral grey."""
    return f"stage-{stage}" if stage in STAGE_COLOURS else "stage-other"


def _plain(s) -> dict:
    """A selection as a dict, from JobOut (typed) or a stored row."""
    s = s if isinstance(s, dict) else s.model_dump()
    return {"mode": s.get("mode"), "k": s.get("k"), "layers": s.get("layers")}


def selected_side_by_side(jobs: list) -> list[dict]:
    """One row per (mode, k) present in any job: each job's selected layers, or None."""
    per_job = [
        {(s["mode"], s["k"]): sorted(s["layers"] or []) for s in map(_plain, j.selected_layers or [])} for j in jobs
    ]
    keys = sorted(set().union(*per_job), key=lambda mk: (str(mk[0]), mk[1] if isinstance(mk[1], int) else 0))
    return [{"mode": m, "k": k, "layers": [p.get((m, k)) for p in per_job]} for m, k in keys]


def artifact_href(uri: str) -> str | None:
    """A link for an artifact: a Hub URL as it is, an API URL as the dashboard's own page of it
    (/v1/jobs/... -> /ui/jobs/..., which the login cookie opens); a server path is text, not a link."""
    if uri.startswith("/v1/jobs/"):
        return "/ui/jobs/" + uri.removeprefix("/v1/jobs/")
    return uri if uri.startswith(("https://", "http://")) else None
