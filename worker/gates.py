"""Quality gates: which outputs may be published, decided on the evaluation against the base.

For a perplexity gate r (max_ppl_increase) and an accuracy gate a (max_acc_drop):

    passed  <=>  ppl <= ppl_base * (1 + r)        (relative rise)
    passed  <=>  acc >= acc_base - a              (absolute drop)

A number that is missing or not finite (a broken model's NaN) passes nothing: a gate that cannot be
checked does not let an output through. An output is published only if it passes every gate; when none
does, the job fails with error.type "quality" (QualityFailure, classed by worker/errors.py). `checks`
is pure: the pipeline (jobs) and `nbl compress --gate` both call it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from nbl.gates import ACC_METRIC, PPL_METRIC
from nbl.recipe import Gates

PPL_GATES = ("max_ppl_increase", "budget")  # "budget": k auto's, checked on the evaluation (worker/budget.py)
Metrics = Mapping[str, Mapping[str, float | None]]  # {"base": {...}, "k4": {...}}, flat names


class QualityFailure(Exception):
    """No output passed its gates: nothing is published."""

    def __init__(self, checks: list[dict]):
        self.checks = checks
        failed = [c for c in checks if not c["passed"]]
        super().__init__("no output passed the quality gates: " + "; ".join(describe(c) for c in failed))


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def check_one(output: str, metric: str, gate: str, allowed: float, base: float | None, value: float | None) -> dict:
    """One check: {"output", "metric", "gate", "allowed", "base", "value", "limit", "passed"}; `limit`
    is the bound on the value itself (the most perplexity, the least accuracy)."""
    limit, ppl = None, gate in PPL_GATES
    if _finite(base):
        limit = base * (1 + allowed) if ppl else base - allowed
    passed = _finite(value) and limit is not None and (value <= limit if ppl else value >= limit)
    shown = lambda x: float(x) if _finite(x) else None  # noqa: E731 - JSON (and JSONB) has no NaN
    return {
        "output": output,
        "metric": metric,
        "gate": gate,
        "allowed": allowed,
        "base": shown(base),
        "value": shown(value),
        "limit": shown(limit),
        "passed": bool(passed),
    }


def checks(gates: Gates, metrics: Metrics, outputs: list[str], schemes: tuple[str, ...] = ()) -> list[dict]:
    """Every gate on every output ("k4", ...), in the order outputs then gates; then gates.quantized's on each
    quantized copy ("k4+w4a16"), against the same (unquantized) base."""
    base = metrics.get("base") or {}
    if gates.quantized is not None and schemes:
        copies = [f"{out}+{s}" for out in outputs for s in schemes]
        return checks(replace(gates, quantized=None), metrics, outputs) + checks(gates.quantized, metrics, copies)
    rules = [("max_ppl_increase", PPL_METRIC.format(name), allowed) for name, allowed in gates.max_ppl_increase.items()]
    rules += [("max_acc_drop", ACC_METRIC.format(name), allowed) for name, allowed in gates.max_acc_drop.items()]
    return [
        check_one(out, metric, gate, allowed, base.get(metric), (metrics.get(out) or {}).get(metric))
        for out in outputs
        for gate, metric, allowed in rules
    ]


def passing(all_checks: list[dict], outputs: list[str]) -> list[str]:
    """The outputs that passed every one of their checks, their quantized copies' ("k4+w4a16") included."""
    return [o for o in outputs if all(c["passed"] for c in all_checks if c["output"].partition("+")[0] == o)]


def summary(all_checks: list[dict]) -> dict:
    """What the job stores and the API shows: {"passed": some output passed, "checks": [...]}."""
    outputs = list(dict.fromkeys(c["output"].partition("+")[0] for c in all_checks))  # a copy counts for its output
    return {"passed": bool(passing(all_checks, outputs)), "checks": all_checks}


def describe(c: dict) -> str:
    """One check in words: `k4 perplexity/wikitext2/ppl 25.1 > 22.8 (base 20.7, at most +10%)`."""

    def num(x) -> str:
        return "missing" if x is None else f"{x:.4g}"

    ppl = c["gate"] in PPL_GATES
    bound = f"at most +{100 * c['allowed']:.4g}%" if ppl else f"at most {c['allowed']:.4g} below"
    if c["gate"] == "budget":
        bound = f"k auto's budget {bound}"
    sign = ("<=" if ppl else ">=") if c["passed"] else (">" if ppl else "<")
    return f"{c['output']} {c['metric']} {num(c['value'])} {sign} {num(c['limit'])} (base {num(c['base'])}, {bound})"


def apply(
    gates: Gates | None, outputs: dict, metrics: Metrics, sink, extra: list[dict] = (), schemes: tuple[str, ...] = ()
) -> dict:
    """The outputs ({k: path}) that may be published. With gates (or `extra` checks made already: k auto's
    budget, worker/budget.py): the checks go to `sink.gates` (the job stores them) and each output held back
    is a warning; QualityFailure when none passes. `schemes`: the quantized copies gates.quantized bounds."""
    if (gates is None or gates.empty()) and not extra:
        return outputs
    names = {k: f"k{k}" for k in outputs}
    found = (checks(gates, metrics, list(names.values()), schemes) if gates is not None else []) + list(extra)
    sink.gates(summary(found))
    kept = set(passing(found, list(names.values())))
    if not kept:
        raise QualityFailure(found)
    for k, name in names.items():
        if name not in kept:
            sink.warning(
                f"k={k} is not published: it failed its quality gates: "
                + "; ".join(describe(c) for c in found if c["output"].partition("+")[0] == name and not c["passed"])
            )
    return {k: path for k, path in outputs.items() if names[k] in kept}
