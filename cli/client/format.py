"""What `nbl` client commands print: numbers people can read, metrics in a stable order, one line
per job or event. Pure functions of the API's answers (nbl_client models or their dicts).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from nbl import job_label

# Families first in this order, then leaves in this order; anything else after, by name.
FAMILIES = ("perplexity", "tasks", "speed")
LEAVES = ("ppl", "bits_per_byte", "tokens", "acc", "acc_norm", "n")


def readable(x) -> str:
    """1.062e+08 -> '106,200,000'; 23.4567 -> '23.457'; 23.5 -> '23.5'; 0.52341 -> '0.5234'; None -> '-'."""
    if x is None:
        return "-"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if not math.isfinite(x):
        return "inf" if x > 0 else "-inf" if x < 0 else "nan"
    a = abs(x)
    if a >= 1e4:
        return f"{x:,.0f}"
    if a >= 1e-3 or a == 0:
        digits = 1 if a >= 100 else 3 if a >= 1 else 4
        return f"{x:.{digits}f}".rstrip("0").rstrip(".") or "0"
    return f"{x:.2e}"  # a tiny score (an NMSE of 1e-5): its magnitude is the information


def metric_order(name: str) -> tuple:
    """perplexity/wikitext2/ppl before .../bits_per_byte, perplexity before tasks before speed."""
    parts = name.split("/")
    family = FAMILIES.index(parts[0]) if parts[0] in FAMILIES else len(FAMILIES)
    leaf = LEAVES.index(parts[-1]) if parts[-1] in LEAVES else len(LEAVES)
    return (family, parts[0] if family == len(FAMILIES) else "", parts[1:-1], leaf, parts[-1])


def metrics_table(metrics: Mapping[str, Mapping[str, float | None]] | None) -> list[str]:
    """One row per metric, one column per variant (base first, then k4, k8, ... by number)."""
    if not metrics:
        return []
    variants = sorted(metrics, key=lambda v: (v != "base", len(v), v))
    names = sorted({n for v in variants for n in (metrics[v] or {})}, key=metric_order)
    if not names:
        return []
    width = max(len(n) for n in names)
    rows = [f"{'metric':<{width}}  " + "  ".join(f"{v:>14}" for v in variants)]
    for n in names:
        rows.append(f"{n:<{width}}  " + "  ".join(f"{readable((metrics[v] or {}).get(n)):>14}" for v in variants))
    return rows


def eta(seconds: float | None) -> str:
    if seconds is None:
        return ""
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"  eta {h}h{m:02d}m" if h else f"  eta {m}m{s:02d}s" if m else f"  eta {s}s"


def recipe_text(spec: dict) -> str:
    """ "attn/nbl/cca k=2,4 form linear": the method and the output form both named (nbl/job_label.py)."""
    w = job_label.words(spec)
    return f"{w['mode']}/{w['method']}/{w['criterion']} k={w['k']} form {w['form']}"


def job_lines(job: dict) -> list[str]:
    spec = job.get("spec") or {}
    lines = [
        f"{job['id']}  {job['status']}"
        + (f"  ({job['stage']} {job.get('progress') or 0:.0%})" if job.get("stage") else "")
    ]
    lines.append(f"  model {(spec.get('model') or {}).get('id')}  {recipe_text(spec)}")
    if job.get("metadata"):
        lines.append("  metadata " + " ".join(f"{k}={v}" for k, v in sorted(job["metadata"].items())))
    for sel in job.get("selected_layers") or []:
        lines.append(
            f"  k={sel.get('k')}: layers {sel.get('layers')}"
            + (f" (chosen by {sel['criterion']})" if sel.get("criterion") else "")
        )
    measured = job.get("selection") or {}
    for t in measured.get("tried") or []:  # the held-out table of a measured selection (greedy, auto, k auto)
        ppl = t.get("heldout_ppl")
        lines.append(
            f"  selection k={t['k']} {t['criterion']}: ppl {'n/a' if ppl is None else f'{ppl:.3f}'} "
            f"layers {t['layers']}"
        )
    for a in job.get("artifacts") or []:
        sha = f" @ {a['commit_sha'][:12]}" if a.get("commit_sha") else ""
        lines.append(f"  {a['kind']} k={a['k']}: {a['uri']}{sha}")
    gates = job.get("gates") or {}
    for c in gates.get("checks") or []:
        lines.append(
            f"  gate {c['output']} {c['metric']}: {readable(c.get('value'))} vs limit "
            f"{readable(c.get('limit'))} (base {readable(c.get('base'))}) {'pass' if c['passed'] else 'FAIL'}"
        )
    if job.get("error"):
        lines.append(f"  error ({job['error']['type']}): {job['error']['message']}")
    return lines


def job_row(job: dict) -> str:
    """`nbl jobs`: id, status, stage and progress, model, k and output form, created, metadata."""
    spec = job.get("spec") or {}
    where = f"{job.get('stage') or '':<9} {job.get('progress') or 0:>4.0%}" if job["status"] == "running" else " " * 14
    meta = " ".join(f"{k}={v}" for k, v in sorted((job.get("metadata") or {}).items()))
    w = job_label.words(spec)
    made = f"k={w['k']} {w['form']}"
    return (
        f"{job['id']}  {job['status']:<10} {where}  {w['model']:<40} {made:<15} "
        f"{str(job.get('created_at') or '')[:19]}  {meta}"
    ).rstrip()


def event_line(ev: dict) -> str:
    text = ev.get("message") or ev.get("stage") or ""
    stage = f" [{ev['stage']}]" if ev.get("stage") and ev.get("kind") != "stage" else ""
    progress = f" {ev['progress']:.1%}" if ev.get("progress") is not None and ev.get("kind") == "progress" else ""
    return f"[{str(ev.get('created_at') or '')[11:19]}] {ev['kind']}{stage}: {text}{progress}"
