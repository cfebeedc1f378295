"""What a job made, or why it made nothing: the job page's Outputs section. A failed job said "No outputs yet."
as if it were still running; it now says why (the stored error's type and message) and which outputs the
gates held back and by how much, as a job that published some and held back others does too.
Pure: the job's JobOut (or its dict) in, words out; the template escapes them.
"""

from __future__ import annotations

from typing import Any

from . import metrics

_WHY = {
    "failed": "The job failed, so it published nothing.",
    "cancelled": "The job was cancelled before it published.",
    "succeeded": "The job finished without publishing (no publish target).",
}


def _plain(x: Any) -> Any:
    return x.model_dump(mode="json") if hasattr(x, "model_dump") else x


def held_back(gates: Any) -> list[dict]:
    """[{"output", "checks": ["WikiText-2 perplexity 25.1 > 22.8 (base 20.7, at most +10%)"]}]: each output
    that failed a gate, with the checks it failed, in the checks' order."""
    out: dict[str, list[str]] = {}
    for c in (_plain(gates) or {}).get("checks") or []:
        if c.get("passed"):
            continue
        m = metrics.describe(c["metric"])
        ppl = c["gate"] != "max_acc_drop"  # a perplexity bound (k auto's budget is one too)
        bound = f"at most +{100 * c['allowed']:.4g}%" if ppl else f"at most {100 * c['allowed']:.4g} pts below"
        sign = ">" if ppl else "<"
        out.setdefault(c["output"], []).append(
            f"{m.name} {metrics.value(m, c.get('value'))} {sign} {metrics.value(m, c.get('limit'))} "
            f"(base {metrics.value(m, c.get('base'))}, {bound})"
        )
    return [{"output": o, "checks": checks} for o, checks in out.items()]


def outcome(job: Any) -> dict:
    """{"error": "type: message" or "", "why": a sentence when nothing was published, "held_back": [...]}."""
    error = _plain(job.error) if getattr(job, "error", None) else None
    why = "" if job.artifacts else _WHY.get(job.status, "No outputs yet.")
    return {
        "error": f"{error.get('type')}: {error.get('message')}" if error else "",
        "why": why,
        "held_back": held_back(getattr(job, "gates", None)),
    }
