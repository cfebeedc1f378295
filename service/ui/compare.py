"""The compare page's metrics: for each metric the jobs measured, every (job, model) value and its
change from a chosen baseline, drawn as one horizontal bar chart of relative changes per metric (inline
SVG, escaped here, like chart.py).

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


MIN_SPAN = 0.05  # the axis reaches at least ±5 %: a +1 % change stays small, a +20 % one fills most of it


def change(e: dict) -> float | None:
    """The entry's relative change from its baseline ((value - ref) / |ref|), None without one."""
    d, ref = e["delta"], e["ref"]
    return d / abs(ref) if d is not None and isinstance(ref, (int, float)) and ref else None


def span(entries: list[dict]) -> float:
    """Half the axis: the largest |change| with a margin, at least MIN_SPAN."""
    changes = [abs(c) for c in map(change, entries) if c is not None]
    return max(MIN_SPAN, *changes) * 1.1 if changes else MIN_SPAN


def chart(row: dict, baseline_label: str) -> str:
    """One bar per (job, model): its relative change from its baseline, drawn from a centre line at 0 %
    on an axis scaled to the largest change (bars from a zero value made a +20 % perplexity a sliver beside
    the value itself); green/red by the metric's direction. A baseline itself is a mark on the centre
    line. Labels left (…job id · model), values and deltas right."""
    metric, entries = row["metric"], row["entries"]
    half = span(entries)
    pw = WIDTH - LEFT - RIGHT
    height = TOP * 2 + ROW * (len(entries) + 1)

    def x(c: float) -> float:
        return LEFT + pw / 2 + c / half * pw / 2

    title = f"{metric.label}: change from {baseline_label}"
    out = [
        f'<svg class="compare-chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}" role="img" aria-label="{escape(title)}" '
        f'data-metric="{escape(metric.path)}" data-span="{half:.4f}"><title>{escape(title)}</title>'
    ]
    bottom = TOP + ROW * len(entries)
    for c in (-half, 0.0, half):  # the axis: −span, 0, +span, under the bars
        out.append(f'<line class="grid" x1="{x(c):.1f}" x2="{x(c):.1f}" y1="{TOP}" y2="{bottom}"/>')
        out.append(
            f'<text class="tick" x="{x(c):.1f}" y="{bottom + ROW * 0.7:.1f}" text-anchor="middle">'
            f"{'0' if c == 0 else f'{c * 100:+.0f}%'}</text>"
        )
    for i, e in enumerate(entries):
        y = TOP + i * ROW
        c = change(e)
        label = f"…{e['job'][-8:]} · {e['variant']}"
        delta = f" {e['delta_text']}" + (f" ({e['relative']})" if e["relative"] else "") if e["delta_text"] else ""
        out.append(
            f'<text class="tick" x="{LEFT - 6}" y="{y + ROW * 0.7:.1f}" text-anchor="end">{escape(label)}</text>'
        )
        if c is not None:
            left, right = sorted((x(0.0), x(c)))
            out.append(
                f'<rect class="cbar {e["judge"] or "same"}" data-job="{escape(e["job"])}" '
                f'data-variant="{escape(e["variant"])}" data-change="{c:.6f}" x="{left:.1f}" y="{y + 3}" '
                f'width="{max(right - left, 0.5):.1f}" height="{ROW - 6}">'
                f"<title>{escape(label)}: {escape(e['text'])}{escape(delta)}</title></rect>"
            )
        elif isinstance(e["ref"], (int, float)):  # a baseline itself: a mark at 0, its value on the right
            out.append(
                f'<line class="ref" data-job="{escape(e["job"])}" data-variant="{escape(e["variant"])}" '
                f'x1="{x(0.0):.1f}" x2="{x(0.0):.1f}" y1="{y + 2}" y2="{y + ROW - 2}"/>'
            )
        out.append(
            f'<text class="value {e["judge"]}" x="{WIDTH - RIGHT + 6}" y="{y + ROW * 0.7:.1f}">'
            f"{escape(e['text'])}{escape(delta)}{'' if e['ref'] is not None else ' (no baseline)'}</text>"
        )
    out.append("</svg>")
    return "".join(out)
