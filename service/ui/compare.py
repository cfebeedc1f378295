"""The compare page's metrics: for each metric the jobs measured, every (job, model) value and its
change from a chosen baseline, drawn as one horizontal bar chart per metric (inline SVG, escaped
here, like chart.py).

The baseline is either "base" (each job's own base model: what compressing cost) or one of the
compared jobs (each model against that job's model of the same name: k4 against its k4, base against
its base). Pure: the jobs' typed results in, rows and markup out.
"""

from __future__ import annotations

from html import escape

from . import metrics
from .views import result_variants, signed, variant_order

WIDTH, ROW, LEFT, RIGHT, TOP = 720, 20, 150, 150, 8


def rows(jobs: list, baseline: str) -> list[dict]:
    """[{"metric": Metric, "entries": [{"job", "variant", "value", "ref", "delta", "relative", "judge",
    "text", "delta_text"}]}], one per shown metric that any job measured, in the results' order."""
    per_job = [result_variants(j.result) for j in jobs]
    reference = next((v for j, v in zip(jobs, per_job) if j.id == baseline), None)
    names = dict.fromkeys(n for variants in per_job for v in variants.values() for n in v["metrics"])
    out = []
    for name in names:
        metric = metrics.describe(name)
        if not metric.shown:
            continue
        entries = []
        for job, variants in zip(jobs, per_job):
            for variant in sorted(variants, key=variant_order):
                x = variants[variant]["metrics"].get(name)
                if not isinstance(x, (int, float)) or isinstance(x, bool):
                    continue
                source = variants if reference is None else reference
                ref = (source.get("base" if reference is None else variant) or {}).get("metrics", {}).get(name)
                is_ref = (reference is None and variant == "base") or job.id == baseline
                d = None if is_ref or not isinstance(ref, (int, float)) else x - ref
                entries.append(
                    {
                        "job": job.id,
                        "variant": variant,
                        "value": x,
                        "ref": ref,
                        "delta": d,
                        "relative": signed(d / abs(ref), True) if d is not None and ref else "",
                        "judge": metrics.judge(metric, d),
                        "text": metrics.value(metric, x),
                        "delta_text": metrics.delta(metric, d),
                    }
                )
        if entries:
            out.append({"metric": metric, "entries": entries})
    return out


def chart(row: dict, baseline_label: str) -> str:
    """One bar per (job, model): its value, a tick at its baseline's value, green/red by the metric's
    direction. Labels left (…job id · model), values and deltas right."""
    metric, entries = row["metric"], row["entries"]
    values = [e["value"] for e in entries] + [e["ref"] for e in entries if isinstance(e["ref"], (int, float))]
    lo, hi = min(0.0, *values), max(0.0, *values)
    hi = hi if hi > lo else lo + 1.0
    pw = WIDTH - LEFT - RIGHT
    height = TOP * 2 + ROW * len(entries)

    def x(v: float) -> float:
        return LEFT + (v - lo) / (hi - lo) * pw

    title = f"{metric.label} against {baseline_label}"
    out = [
        f'<svg class="compare-chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}" role="img" aria-label="{escape(title)}" '
        f'data-metric="{escape(metric.path)}"><title>{escape(title)}</title>'
    ]
    for i, e in enumerate(entries):
        y = TOP + i * ROW
        left, right = sorted((x(0.0), x(e["value"])))
        label = f"…{e['job'][-8:]} · {e['variant']}"
        change = f" {e['delta_text']}" + (f" ({e['relative']})" if e["relative"] else "") if e["delta_text"] else ""
        out.append(
            f'<text class="tick" x="{LEFT - 6}" y="{y + ROW * 0.7:.1f}" text-anchor="end">{escape(label)}</text>'
        )
        out.append(
            f'<rect class="cbar {e["judge"] or "same"}" data-job="{escape(e["job"])}" data-variant="{escape(e["variant"])}" '
            f'x="{left:.1f}" y="{y + 3}" width="{max(right - left, 0.5):.1f}" height="{ROW - 6}">'
            f"<title>{escape(label)}: {escape(e['text'])}{escape(change)}</title></rect>"
        )
        if isinstance(e["ref"], (int, float)) and e["delta"] is not None:
            out.append(
                f'<line class="ref" x1="{x(e["ref"]):.1f}" x2="{x(e["ref"]):.1f}" y1="{y + 1}" y2="{y + ROW - 1}"/>'
            )
        out.append(
            f'<text class="value {e["judge"]}" x="{WIDTH - RIGHT + 6}" y="{y + ROW * 0.7:.1f}">'
            f"{escape(e['text'])}{escape(change)}</text>"
        )
    out.append("</svg>")
    return "".join(out)
